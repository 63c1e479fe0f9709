// llama.cpp's weight formats (Q8_0, Q4_0, Q4_K, Q6_K) and its file mixtures (Q8_0, Q4_0, Q4_K_M,
// Q6_K) as round trips in f32, for one purpose: measuring their quality on the same model and the same
// text as our int8 / int4 (issue 13's table), where no llama.cpp build is at hand.
//
// Written from the algorithms of ggml's reference quantizers (quantize_row_*_ref, used by
// llama-quantize when no importance matrix is given) and of llama-quant.cpp's type selection; the
// values are what those functions produce, the block bit-packing is left out (a 6-bit scale is kept
// as its integer). Only the weights are emulated: llama.cpp's CPU kernels also quantize activations
// (Q8_0 / Q8_K), so a model run with these weights in f32 understates llama.cpp's error slightly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gdn::llama_emul {

enum class GgmlType { F32, Q8_0, Q4_0, Q4_K, Q6_K };

const char* type_name(GgmlType t);
int64_t block_size(GgmlType t);      // values per block (the row length must be a multiple)
double bits_per_weight(GgmlType t);  // including the block's scales

// out[n] = dequantize(quantize(x[n])); n a multiple of block_size(t). x and out may alias.
void round_trip(GgmlType t, const float* x, int64_t n, float* out);

// The file mixtures llama-quantize writes (its --type argument), no importance matrix.
enum class Mixture { Q8_0, Q4_0, Q4_K_M, Q6_K };
bool parse_mixture(const std::string& s, Mixture* out);
const char* mixture_name(Mixture m);

// A 2-D weight of the checkpoint under its canonical name (Checkpoint's: "layers.3.mlp.down_proj.weight",
// "embed_tokens.weight", "lm_head.weight"), in file order.
struct WeightInfo {
    std::string name;
    int64_t rows = 0, cols = 0;
};
// An MoE router (mlp.gate, shared_expert_gate): llama.cpp keeps it unquantized (ffn_gate_inp), and so
// does our engine.
bool is_router(const std::string& name);

// llama-quant.cpp's choice per weight for a Qwen3.5-style hybrid model converted to GGUF: the
// llama.cpp tensor a name maps to (attn_qkv for the GDN q/k/v, attn_v, ffn_down, output / tied
// token_embd, ...) decides its category; F32 for the weights llama.cpp keeps unquantized (conv1d).
// `tied`: the embedding is also the output matrix. `n_layers`: main-model layers (GGUF block count).
std::vector<GgmlType> choose_types(Mixture m, const std::vector<WeightInfo>& weights, bool tied,
                                   int n_layers);

}  // namespace gdn::llama_emul
