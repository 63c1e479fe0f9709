#include "engine/gguf_tokenizer.h"

namespace gdn {

Result<std::shared_ptr<const Tokenizer>> gguf_tokenizer(const GgufFile& f, const std::string& chat_template) {
    GDN_ASSIGN_OR_RETURN(std::string model, f.get_string("tokenizer.ggml.model"));
    if (model != "gpt2")
        return Status::error(f.path() + ": tokenizer.ggml.model '" + model +
                             "' is not supported (byte-level BPE, 'gpt2', is)");
    BpeArrays a;
    GDN_ASSIGN_OR_RETURN(a.tokens, f.get_strings("tokenizer.ggml.tokens"));
    GDN_ASSIGN_OR_RETURN(a.types, f.get_ints("tokenizer.ggml.token_type"));
    GDN_ASSIGN_OR_RETURN(a.merges, f.get_strings("tokenizer.ggml.merges"));
    GDN_ASSIGN_OR_RETURN(a.pre, f.get_string("tokenizer.ggml.pre"));
    if (f.find("tokenizer.ggml.eos_token_id")) {
        GDN_ASSIGN_OR_RETURN(a.eos_id, f.get_int("tokenizer.ggml.eos_token_id"));
    }
    if (!chat_template.empty()) {
        a.chat_template = chat_template;
    } else if (f.find("tokenizer.chat_template")) {
        GDN_ASSIGN_OR_RETURN(a.chat_template, f.get_string("tokenizer.chat_template"));
    }
    return Tokenizer::from_bpe_arrays(a, f.path());
}

Result<std::shared_ptr<const Tokenizer>> load_model_tokenizer(const std::string& model,
                                                              const std::string& chat_template) {
    if (!is_gguf_path(model)) return Tokenizer::load(model, chat_template);
    GDN_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> f, GgufFile::open(model));  // the first part holds it
    return gguf_tokenizer(*f, chat_template);
}

}  // namespace gdn
