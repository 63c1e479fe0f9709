// ModelConfig from a GGUF file's metadata (llama.cpp's `qwen35`, `qwen35moe` and `qwen3next` architectures):
// the same geometry the HF config.json gives, so everything downstream is the same. Keys are `{arch}.*`
// (block_count counts the MTP layers too: nextn_predict_layers of them are the last blocks); the vocabulary
// is token_embd's row count, tied embeddings are a file without output.weight. A missing key or one of the
// wrong type is an error that names it.
#pragma once

#include "model/config.h"
#include "model/gguf_file.h"

namespace gdn {

Result<ModelConfig> gguf_model_config(const GgufFile& f);

}  // namespace gdn
