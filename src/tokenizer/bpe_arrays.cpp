// A GGUF vocabulary as the tokenizer.json it came from: llama.cpp's converter writes a Hugging Face
// byte-level BPE tokenizer as arrays (tokens, types, merges) and names its pre-tokenizer; this writes the
// equivalent tokenizer.json and tokenizer_config.json and reads them with the one parser, so both kinds of
// checkpoint tokenize through exactly the same code.
#include "core/log.h"
#include "tokenizer/tokenizer.h"
#include "util/json_file.h"

namespace gdn {

namespace {

// The split regexes of the pre-tokenizers llama.cpp names for these models (the checkpoints'
// tokenizer.json patterns; model_spec.md §7): Qwen2/3, and Qwen3.5's, whose letter class takes \p{M}.
const char* split_regex(const std::string& pre) {
    if (pre == "qwen2")
        return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    if (pre == "qwen35")
        return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    return nullptr;
}

enum TokenType : int64_t { NORMAL = 1, UNKNOWN = 2, CONTROL = 3, USER_DEFINED = 4, UNUSED = 5, BYTE = 6 };

}  // namespace

Result<std::shared_ptr<const Tokenizer>> Tokenizer::from_bpe_arrays(const BpeArrays& a,
                                                                    const std::string& origin) {
    auto fail = [&](const std::string& what) { return Status::error(origin + ": " + what); };
    const char* regex = split_regex(a.pre);
    if (!regex)
        return fail("tokenizer.ggml.pre '" + a.pre +
                    "' is not a pre-tokenizer this engine knows (qwen2, qwen35)");
    if (a.types.size() != a.tokens.size())
        return fail(strprintf("tokenizer.ggml.token_type has %zu entries for %zu tokens", a.types.size(),
                              a.tokens.size()));
    SortedJson vocab = SortedJson::object(), added = SortedJson::array();
    for (size_t id = 0; id < a.tokens.size(); ++id) {
        const std::string text(a.tokens[id]);
        switch (a.types[id]) {
            case NORMAL:
                vocab[text] = id;
                break;
            case CONTROL:
            case USER_DEFINED:
                added.push_back({{"id", id},
                                 {"content", text},
                                 {"special", a.types[id] == CONTROL},
                                 {"lstrip", false},
                                 {"rstrip", false},
                                 {"normalized", false},
                                 {"single_word", false}});
                break;
            case UNUSED:  // the converter's padding rows up to the embedding's size: not tokens
                break;
            default:
                return fail(
                    strprintf("token %zu has type %lld, which a byte-level BPE vocabulary does not use", id,
                              static_cast<long long>(a.types[id])));
        }
    }
    SortedJson merges = SortedJson::array();
    for (std::string_view m : a.merges) merges.push_back(std::string(m));
    const SortedJson byte_level = {
        {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
    const SortedJson tokenizer = {{"model",
                                   {{"type", "BPE"},
                                    {"vocab", std::move(vocab)},
                                    {"merges", std::move(merges)},
                                    {"ignore_merges", false}}},
                                  {"added_tokens", std::move(added)},
                                  {"normalizer", {{"type", "NFC"}}},
                                  {"pre_tokenizer",
                                   {{"type", "Sequence"},
                                    {"pretokenizers", SortedJson::array({{{"type", "Split"},
                                                                          {"pattern", {{"Regex", regex}}},
                                                                          {"behavior", "Isolated"},
                                                                          {"invert", false}},
                                                                         byte_level})}}},
                                  {"decoder", byte_level}};
    Json config = Json::object();
    if (a.eos_id >= 0) {
        if (static_cast<size_t>(a.eos_id) >= a.tokens.size())
            return fail("tokenizer.ggml.eos_token_id is not a token");
        config["eos_token"] = std::string(a.tokens[a.eos_id]);
    }
    if (!a.chat_template.empty()) config["chat_template"] = a.chat_template;
    std::string tokenizer_json, config_json;
    try {  // dump() refuses text that is not UTF-8 (a token, the template)
        tokenizer_json = tokenizer.dump();
        config_json = config.dump();
    } catch (const SortedJson::exception&) {
        return fail("a token or the chat template is not valid UTF-8");
    }
    return from_json(tokenizer_json, config_json, origin);
}

}  // namespace gdn
