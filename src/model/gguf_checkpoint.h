// A GGUF model's tensors as a Checkpoint (model/checkpoint.h, Layout::GGUF): llama.cpp's names mapped to the
// canonical ones the loader reads (token_embd -> embed_tokens, blk.N.attn_qkv -> layers.N.linear_attn.
// in_proj_qkv, blk.{n_layers}.nextn.eh_proj -> mtp.fc, ...), each a view into the mapping: float tensors
// (F32 / F16 / BF16) as such, quantized ones as rows of ggml blocks (DType::GGML). A tensor of a type we do
// not read (IQ1 / IQ2 / IQ3, ternary) is an error naming it and its type; an unknown name is kept under
// its own name (the loader warns that it is unused).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/config.h"
#include "model/gguf_file.h"

namespace gdn {

// The files of a GGUF model: `path` alone, or, when its split.count says it is one of several (llama.cpp's
// gguf-split: "NAME-00001-of-00003.gguf", metadata in the first), every part in order. A missing part, or
// one whose split.no / split.count disagrees with its name, is an error naming it.
Result<std::vector<std::shared_ptr<const GgufFile>>> open_gguf_parts(const std::string& path);

Result<Checkpoint> gguf_checkpoint(std::vector<std::shared_ptr<const GgufFile>> parts,
                                   const ModelConfig& config);

// The canonical name of the GGUF tensor `name` of a model with n_layers main layers (empty: not one of
// the names llama.cpp gives these architectures).
std::string gguf_canonical_name(const std::string& name, int n_layers);

}  // namespace gdn
