#include "model/state.h"

#include <algorithm>

namespace gdn {

SequenceState::SequenceState(const ModelConfig& c, DType kv) : kv_dtype(kv) {
    const size_t conv_n = static_cast<size_t>(c.conv_kernel - 1) * c.gdn_conv_dim();
    const size_t ssm_n = static_cast<size_t>(c.gdn_v_heads) * c.gdn_v_dim * c.gdn_k_dim;
    conv.assign(c.n_gdn_layers(), std::vector<float>(conv_n, 0.0f));
    ssm.assign(c.n_gdn_layers(), std::vector<float>(ssm_n, 0.0f));
    k_cache.resize(c.n_attention_layers());
    v_cache.resize(c.n_attention_layers());
    kv_row_ = static_cast<int64_t>(c.attn_kv_heads) * c.head_dim;
}

void SequenceState::reserve(int64_t tokens) {
    // Sized, not only reserved: the zero fill maps the pages now. Mapped on first touch inside a decode
    // step instead, each new 4 KiB page cost a page fault of ~25 us in the CI VM (six per step, 0.6%).
    const size_t bytes = static_cast<size_t>(tokens) * kv_row_bytes();
    for (auto* caches : {&k_cache, &v_cache})
        for (auto& v : *caches)
            if (v.size() < bytes) v.resize(bytes);
}

void SequenceState::reset() {
    n_past = 0;
    for (auto& v : conv) std::fill(v.begin(), v.end(), 0.0f);
    for (auto& v : ssm) std::fill(v.begin(), v.end(), 0.0f);
    for (auto& v : k_cache) v.clear();
    for (auto& v : v_cache) v.clear();
}

}  // namespace gdn
