#include "llama_quant_emulation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "core/dtype.h"
#include "model/quant_scheme.h"
#include "ops/quant/kquant.h"

namespace gdn::llama_emul {
namespace {

using kquant::fit_symmetric_scale;
using kquant::largest_magnitude;
using kquant::nearest_int;

constexpr int kSuper = 256;  // QK_K: the k-quants' super-block
constexpr float kGroupMaxEps = 1e-15f;

float f16(float v) {
    return f16_to_f32(f32_to_f16(v));
}

// Q8_0: blocks of 32, d = max|x| / 127 (stored f16), q = roundf(x / d) with the unrounded d.
void round_trip_q8_0(const float* x, float* out) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const float dq = f16(d);
    for (int i = 0; i < 32; ++i) out[i] = std::round(x[i] * id) * dq;
}

// Q4_0: blocks of 32, d = (the value of largest magnitude) / -8, q = min(15, trunc(x / d + 8.5)) - 8.
void round_trip_q4_0(const float* x, float* out) {
    const float d = largest_magnitude(x, 32) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const float dq = f16(d);
    for (int i = 0; i < 32; ++i) {
        const int q = std::min(15, static_cast<int>(static_cast<int8_t>(x[i] * id + 8.5f)));
        out[i] = static_cast<float>(q - 8) * dq;
    }
}

// Q6_K: 16 sub-blocks of 16, each a signed 8-bit scale level of one f16 d; values -32..31.
void round_trip_q6_k(const float* x, float* out) {
    float scales[kSuper / 16];
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < kSuper / 16; ++ib) {
        scales[ib] = fit_symmetric_scale(x + 16 * ib, 16, 32);
        if (std::fabs(scales[ib]) > max_abs_scale) {
            max_abs_scale = std::fabs(scales[ib]);
            max_scale = scales[ib];
        }
    }
    if (max_abs_scale < kGroupMaxEps) {
        std::fill(out, out + kSuper, 0.0f);
        return;
    }
    const float iscale = -128.0f / max_scale;
    const float d = f16(1 / iscale);
    for (int ib = 0; ib < kSuper / 16; ++ib) {
        const int8_t sc = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
        const float dl = d * sc;
        for (int i = 0; i < 16; ++i) {
            const float v = x[16 * ib + i];
            const int l = dl != 0.0f ? std::clamp(nearest_int(v / dl), -32, 31) : 0;
            out[16 * ib + i] = dl * l;
        }
    }
}

void round_trip_q4_k(const float* x, float* out) {
    const kquant::Q4KBlock b = kquant::quantize_q4k(x, kquant::Q4KFit::GGML);
    for (int j = 0; j < 8; ++j) {
        const float dl = b.d * b.sc[j], ml = b.dmin * b.m[j];
        for (int i = 0; i < 32; ++i) out[32 * j + i] = dl * b.q[32 * j + i] - ml;
    }
}

}  // namespace

const char* type_name(GgmlType t) {
    switch (t) {
        case GgmlType::F32:
            return "F32";
        case GgmlType::Q8_0:
            return "Q8_0";
        case GgmlType::Q4_0:
            return "Q4_0";
        case GgmlType::Q4_K:
            return "Q4_K";
        case GgmlType::Q6_K:
            return "Q6_K";
    }
    return "?";
}

int64_t block_size(GgmlType t) {
    switch (t) {
        case GgmlType::F32:
            return 1;
        case GgmlType::Q8_0:
        case GgmlType::Q4_0:
            return 32;
        case GgmlType::Q4_K:
        case GgmlType::Q6_K:
            return kSuper;
    }
    return 1;
}

double bits_per_weight(GgmlType t) {
    switch (t) {
        case GgmlType::F32:
            return 32.0;
        case GgmlType::Q8_0:
            return 8.0 * 34 / 32;  // f16 d + 32 int8
        case GgmlType::Q4_0:
            return 8.0 * 18 / 32;  // f16 d + 16 bytes of nibbles
        case GgmlType::Q4_K:
            return 8.0 * 144 / 256;  // d, dmin, 12 bytes of 6-bit levels, 128 of nibbles
        case GgmlType::Q6_K:
            return 8.0 * 210 / 256;  // 128 low nibbles, 64 high pairs, 16 int8 scales, d
    }
    return 0.0;
}

void round_trip(GgmlType t, const float* x, int64_t n, float* out) {
    const int64_t bs = block_size(t);
    if (n % bs != 0)
        throw std::invalid_argument(std::string(type_name(t)) + ": a row of " + std::to_string(n) +
                                    " values is not a multiple of the block of " + std::to_string(bs));
    float tmp[kSuper];  // each block is read whole before it is written (x may alias out)
    for (int64_t b = 0; b < n; b += bs) {
        switch (t) {
            case GgmlType::F32:
                out[b] = x[b];
                break;
            case GgmlType::Q8_0:
                round_trip_q8_0(x + b, tmp);
                break;
            case GgmlType::Q4_0:
                round_trip_q4_0(x + b, tmp);
                break;
            case GgmlType::Q4_K:
                round_trip_q4_k(x + b, tmp);
                break;
            case GgmlType::Q6_K:
                round_trip_q6_k(x + b, tmp);
                break;
        }
        if (t != GgmlType::F32) std::copy(tmp, tmp + bs, out + b);
    }
}

bool parse_mixture(const std::string& s, Mixture* out) {
    for (Mixture m : {Mixture::Q8_0, Mixture::Q4_0, Mixture::Q4_K_M, Mixture::Q6_K}) {
        if (s == mixture_name(m)) {
            *out = m;
            return true;
        }
    }
    return false;
}

const char* mixture_name(Mixture m) {
    switch (m) {
        case Mixture::Q8_0:
            return "Q8_0";
        case Mixture::Q4_0:
            return "Q4_0";
        case Mixture::Q4_K_M:
            return "Q4_K_M";
        case Mixture::Q6_K:
            return "Q6_K";
    }
    return "?";
}

namespace {

// llama-quant.cpp's tensor categories, by the GGUF tensor each checkpoint name converts to.
enum class Category { OUTPUT, TOKEN_EMBD, ATTN_V_LIKE, FFN_DOWN, UNQUANTIZED, OTHER };

bool contains(const std::string& s, const char* part) {
    return s.find(part) != std::string::npos;
}

Category category_of(const std::string& name, bool tied) {
    if (name == "lm_head.weight") return Category::OUTPUT;
    if (name == "embed_tokens.weight") return tied ? Category::OUTPUT : Category::TOKEN_EMBD;
    if (contains(name, "conv1d")) return Category::UNQUANTIZED;  // ssm_conv1d: never quantized
    if (is_router(name)) return Category::UNQUANTIZED;           // ffn_gate_inp(_shexp): never quantized
    // attn_qkv (the GDN q/k/v projection) and attn_v count as "attention-v-like" (category_is_attn_v).
    if (contains(name, "linear_attn.in_proj_qkv.") || contains(name, "self_attn.v_proj."))
        return Category::ATTN_V_LIKE;
    if (contains(name, "down_proj")) return Category::FFN_DOWN;
    return Category::OTHER;  // attn_q / attn_k / attn_output / attn_gate / ssm_alpha / ssm_beta / ssm_out /
                             // ffn_gate / ffn_up
}

int layer_of(const std::string& name) {
    int layer = -1;
    if (std::sscanf(name.c_str(), "layers.%d.", &layer) != 1) return -1;
    return layer;
}

}  // namespace

bool is_router(const std::string& name) {
    return contains(name, ".mlp.gate.weight") || contains(name, "shared_expert_gate.weight");
}

std::vector<GgmlType> choose_types(Mixture mix, const std::vector<WeightInfo>& weights, bool tied,
                                   int n_layers) {
    // llama-quantize walks tensors by (block index, name): the attention-v-like counter follows that order.
    std::vector<size_t> order(weights.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        const int la = layer_of(weights[a].name), lb = layer_of(weights[b].name);
        return la != lb ? la < lb : weights[a].name < weights[b].name;
    });
    int n_attn_v = 0;
    for (const WeightInfo& w : weights) n_attn_v += category_of(w.name, tied) == Category::ATTN_V_LIKE;

    const GgmlType base = mix == Mixture::Q8_0   ? GgmlType::Q8_0
                          : mix == Mixture::Q4_0 ? GgmlType::Q4_0
                          : mix == Mixture::Q6_K ? GgmlType::Q6_K
                                                 : GgmlType::Q4_K;
    std::vector<GgmlType> types(weights.size(), base);
    int i_attn_v = 0;
    for (size_t idx : order) {
        const WeightInfo& w = weights[idx];
        GgmlType t = base;
        switch (category_of(w.name, tied)) {
            case Category::UNQUANTIZED:
                t = GgmlType::F32;
                break;
            case Category::OUTPUT:  // Q6_K unless the file type is Q8_0 (or the row does not fit its blocks)
                t = base == GgmlType::Q8_0 ? GgmlType::Q8_0
                    : w.cols % kSuper != 0 ? GgmlType::Q8_0
                                           : GgmlType::Q6_K;
                break;
            case Category::ATTN_V_LIKE:
                if (mix == Mixture::Q4_K_M && use_more_bits(i_attn_v, n_attn_v)) t = GgmlType::Q6_K;
                ++i_attn_v;
                break;
            case Category::FFN_DOWN:
                if (mix == Mixture::Q4_K_M && use_more_bits(layer_of(w.name), n_layers)) t = GgmlType::Q6_K;
                break;
            case Category::TOKEN_EMBD:
            case Category::OTHER:
                break;
        }
        if (w.cols % block_size(t) != 0)  // llama.cpp falls back to Q5_0 / Q8_0 here: not emulated
            throw std::invalid_argument(w.name + ": " + std::to_string(w.cols) + " columns do not fill " +
                                        type_name(t) +
                                        " blocks; llama.cpp's fallback types are not emulated");
        types[idx] = t;
    }
    return types;
}

}  // namespace gdn::llama_emul
