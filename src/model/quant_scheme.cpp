#include "model/quant_scheme.h"

#include <cstdlib>

namespace gdn {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The layer index of "layers.<i>.…" (-1 for another name: the lm_head, the embedding, mtp.*).
int layer_of(const std::string& linear) {
    if (linear.rfind("layers.", 0) != 0) return -1;
    return std::atoi(linear.c_str() + 7);
}

}  // namespace

bool use_more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

WeightFormat scheme_format(WeightFormat scheme, const std::string& linear, int n_layers) {
    switch (scheme) {
        case WeightFormat::Q4:
            return linear == "lm_head" ? WeightFormat::Q8 : WeightFormat::Q4;
        case WeightFormat::Q4K: {
            if (linear == "lm_head") return WeightFormat::Q6K;
            const int layer = layer_of(linear);
            const bool sensitive = ends_with(linear, ".linear_attn.in_proj") || ends_with(linear, ".down");
            return layer >= 0 && sensitive && use_more_bits(layer, n_layers) ? WeightFormat::Q6K
                                                                             : WeightFormat::Q4K;
        }
        default:
            return scheme;
    }
}

}  // namespace gdn
