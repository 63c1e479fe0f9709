// The tokenizer and chat template a GGUF file carries (tokenizer.ggml.* and tokenizer.chat_template), as
// a Tokenizer: the same one the checkpoint's tokenizer.json gives (tokenizer/tokenizer.h from_bpe_arrays).
// A non-empty chat_template replaces the file's (--chat-template).
#pragma once

#include <memory>
#include <string>

#include "model/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace gdn {

Result<std::shared_ptr<const Tokenizer>> gguf_tokenizer(const GgufFile& f,
                                                        const std::string& chat_template = "");

// The tokenizer of what --model names: a checkpoint folder's tokenizer.json (Tokenizer::load) or a GGUF
// file's metadata. A non-empty chat_template replaces the model's.
Result<std::shared_ptr<const Tokenizer>> load_model_tokenizer(const std::string& model,
                                                              const std::string& chat_template = "");

}  // namespace gdn
