#include "model/state.h"

#include <algorithm>
#include <cstring>

namespace gdn {

SequenceState::SequenceState(const ModelConfig& c, DType kv, bool mtp) : kv_dtype(kv) {
    conv_n_ = static_cast<size_t>(c.gdn_conv_state_floats());
    ssm_n_ = static_cast<size_t>(c.gdn_ssm_state_floats());
    conv_.allocate(c.n_gdn_layers() * conv_n_ * sizeof(float));  // zeroed
    ssm_.allocate(c.n_gdn_layers() * ssm_n_ * sizeof(float));
    k_cache.resize(c.n_attention_layers() + (mtp ? 1 : 0));
    v_cache.resize(c.n_attention_layers() + (mtp ? 1 : 0));
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
    mtp_past = 0;
    if (conv_.data()) std::memset(conv_.data(), 0, conv_.size());
    if (ssm_.data()) std::memset(ssm_.data(), 0, ssm_.size());
    for (auto& v : k_cache) v.clear();
    for (auto& v : v_cache) v.clear();
}

}  // namespace gdn
