// Pre-quantized checkpoints, written by `gdn quantize` so that later loads skip the quantization (the
// int4 scale search is most of a 9B load). A safetensors file (format version 2):
//
//   __metadata__  "gdn.quantization": "int8" | "int4" | "int4-sym"   the --quantization scheme that made it
//                 "gdn.packed.version": "2"
//                 "gdn.packed.<linear>": "<format> <N> <K>"   one per packed weight: "int4-k 7168 1024",
//                                     the format one of int8, int4-sym, int4-k, int6-k (ops/weight_format.h)
//   tensors       "gdn.packed.<linear>": U8 [n_panels, n_blocks, block_bytes], the PackedWeight's bytes
//                 exactly as the kernels read them (ops/quant/quant_format.h: 32-column panels of
//                 blocks of 32 or 256 k, values and scales);
//                 every other tensor the model reads (norms, conv1d, A_log, dt_bias, the MoE router and
//                 shared-expert gate), as stored in the source checkpoint, under its HF name.
//
// <linear> is the name for_each_linear gives the packed weight (model/weights.h): the fused
// projections as the forward runs them, e.g. "layers.0.linear_attn.in_proj" (q|k|v|z|b|a stacked),
// "layers.3.self_attn.qkv", "layers.0.mlp.gate_up" (gate and up interleaved in blocks of 16 rows when
// the intermediate size is a multiple of 16, else stacked), "layers.0.mlp.experts.7.down", "mtp.fc",
// "lm_head", "embed_tokens" (an untied embedding). A tied embedding is the lm_head's rows.
#pragma once

#include <optional>
#include <string>

#include "core/status.h"
#include "model/checkpoint.h"
#include "ops/linear.h"

namespace gdn {

struct ModelWeights;

constexpr const char* kPackedPrefix = "gdn.packed.";
constexpr const char* kPackedQuantizationKey = "gdn.quantization";
constexpr const char* kPackedVersionKey = "gdn.packed.version";
// Version 1 (before the int4-k / int6-k formats) named the symmetric int4 format "int4".
constexpr const char* kPackedVersion = "2";

// The format a checkpoint was quantized to by `gdn quantize`; nullopt for an ordinary checkpoint. An
// unknown version or quantization is an error naming it.
Result<std::optional<WeightFormat>> packed_checkpoint_format(const Checkpoint& ck);

// The packed weight <linear> of a pre-quantized checkpoint, checked against the logical shape [N, K]
// the config implies, copied out of the mapping (whose pages are released after). Missing, misshapen or
// corrupt entries (a byte count that does not match, a non-finite scale) are errors naming the tensor.
Result<PackedWeight> read_packed_weight(const Checkpoint& ck, const std::string& linear, int64_t N,
                                        int64_t K);

// Writes `w` (loaded with a quantization from `ck`) as a pre-quantized model.safetensors at `path`: the
// packed weights, and every other tensor the loader read (`float_tensors`: canonical names) copied from
// `ck`. One tensor in memory at a time beside the loaded model.
Status write_packed_checkpoint(const ModelWeights& w, const Checkpoint& ck,
                               const std::vector<std::string>& float_tensors, const std::string& path);

}  // namespace gdn
