// A standalone sequence's caches (tools, tests, `--dump-logits`): the GDN conv and recurrent states
// (fixed size, the same layouts as the engine's state slots) and a contiguous growing KV cache per
// attention layer. The engine uses the paged KV cache and dense state slots instead (cache/).
#pragma once

#include <cstdint>
#include <vector>

#include "core/buffer.h"
#include "core/dtype.h"
#include "model/config.h"
#include "model/forward_workspace.h"

namespace gdn {

// The K/V cache dtype the engine and the tools use unless told otherwise: BF16 with bf16 activations (half
// the bytes per token, and decode at depth reads half the K/V; K and V rounded as HF's bf16 forward does,
// at the f32 cache's quality: docs/perf.md, "bf16 K/V by default"), F32 in the f32 mode.
inline DType default_kv_dtype(bool bf16_activations) {
    return bf16_activations ? DType::BF16 : DType::F32;
}

struct SequenceState {
    int64_t n_past = 0;  // tokens already consumed (positions of the next token start here)
    // Per attention layer: K and V rows [rows, Hkv, D] (post-norm, post-RoPE k; raw v) as raw bytes of
    // kv_dtype elements: F32, or BF16 for a bf16-activation forward (whose K/V are bf16 values). The
    // first n_past rows are the sequence's; reserve() may size the vectors beyond them.
    DType kv_dtype = DType::F32;
    std::vector<std::vector<uint8_t>> k_cache, v_cache;

    // mtp: one more attention layer's K/V (the last entry), for the MTP draft layer's slots.
    explicit SequenceState(const ModelConfig& c, DType kv_dtype = DType::F32, bool mtp = false);
    int64_t mtp_past = 0;  // MTP slots in the MTP KV cache (Model::mtp_forward)
    // The buffers of the standalone forwards this sequence leads (Model::forward of a batch uses its first
    // sequence's; made on first use).
    ForwardWorkspacePtr workspace;
    // Per GDN layer gi (in layer order): conv [K-1, CD] (last K-1 raw inputs, oldest first) and the
    // recurrent state [Hv, Dk, Dv] in f32 (the spec's S per value head, values contiguous). All layers'
    // states are one huge-page Buffer, like the engine's state slots: a decode step streams each layer's
    // state, and 4 KiB pages slowed the GDN decode op (docs/perf.md, behind the constants: model/state.h).
    float* conv(int gi) const { return conv_.as<float>() + static_cast<size_t>(gi) * conv_n_; }
    float* ssm(int gi) const { return ssm_.as<float>() + static_cast<size_t>(gi) * ssm_n_; }
    int64_t kv_row_elems() const { return kv_row_; }
    size_t kv_row_bytes() const { return static_cast<size_t>(kv_row_) * dtype_size(kv_dtype); }
    void reset();
    // Sizes the KV caches for `tokens` positions (zeroed, pages mapped), so appending up to there never
    // allocates or faults.
    void reserve(int64_t tokens);

  private:
    int64_t kv_row_ = 0;             // Hkv * D
    size_t conv_n_ = 0, ssm_n_ = 0;  // floats per GDN layer
    Buffer conv_, ssm_;
};

}  // namespace gdn
