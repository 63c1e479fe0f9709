// GDN state slots: each running request owns one slot holding, for every GDN layer, the conv state
// ([K-1, CD], last raw inputs) and the recurrent state ([Hv, Dk, Dv] f32), dense per layer in the layout
// the kernels read. A new request's slot is not cleared here: the first forward of a sequence
// (has_initial_state = false, from its computed-token count) zeroes exactly that slot's memory. The same
// arena holds the prefix cache's snapshots (SnapshotCache says which slots).
#pragma once

#include <cstdint>
#include <vector>

#include "cache/id_pool.h"
#include "core/buffer.h"

namespace gdn {

class StateSlots {
  public:
    StateSlots(int n_gdn_layers, int64_t conv_floats, int64_t ssm_floats, int32_t n_slots);
    int32_t n_slots() const { return ids_.size(); }
    int32_t n_free() const { return ids_.n_free(); }
    int32_t allocate() { return ids_.allocate(); }  // -1 if none
    void release(int32_t slot) { ids_.release(slot); }
    float* conv(int layer, int32_t slot) {
        return conv_.as<float>() + (int64_t{layer} * n_slots_ + slot) * conv_n_;
    }
    float* ssm(int layer, int32_t slot) {
        return ssm_.as<float>() + (int64_t{layer} * n_slots_ + slot) * ssm_n_;
    }
    // Copies every layer's state of slot `from` into slot `to` (prefix-cache snapshots and restores).
    void copy(int32_t from, int32_t to);
    // Speculative verification: the GDN layers' input rows (the in_proj outputs) of the tokens a step
    // verifies, for up to n_seqs sequences of up to tokens_per_seq tokens, rows of row_floats. A verify
    // forward only reads the state and stages its rows here; the commit after acceptance reruns the
    // accepted ones into the state (Model::commit_verified). Rows of sequence s (its index in the plan)
    // and GDN layer l start at verify_rows(l, s).
    void reserve_verify_rows(int32_t n_seqs, int64_t tokens_per_seq, int64_t row_floats);
    float* verify_rows(int layer, int32_t seq) {
        return verify_.as<float>() + ((int64_t{layer} * verify_seqs_ + seq) * verify_tokens_) * verify_row_;
    }
    int32_t verify_seqs() const { return verify_seqs_; }
    int64_t verify_tokens_per_seq() const { return verify_tokens_; }
    int64_t verify_row_floats() const { return verify_row_; }
    size_t verify_bytes() const { return verify_.size(); }
    // The storage (EngineConfig::prefault_memory touches it once at creation).
    std::vector<Buffer*> buffers() { return {&conv_, &ssm_, &verify_}; }
    static size_t bytes_per_slot(int n_gdn_layers, int64_t conv_floats, int64_t ssm_floats) {
        return static_cast<size_t>(n_gdn_layers) * (conv_floats + ssm_floats) * sizeof(float);
    }
    // The verify staging rows of one sequence (reserve_verify_rows).
    static size_t verify_bytes_per_seq(int n_gdn_layers, int64_t tokens_per_seq, int64_t row_floats) {
        return static_cast<size_t>(n_gdn_layers) * tokens_per_seq * row_floats * sizeof(float);
    }

  private:
    IdPool ids_;
    int n_layers_;
    int64_t n_slots_, conv_n_, ssm_n_;
    // All layers' states in one buffer each, [layer][slot][state]: large enough for huge pages even with
    // few slots (per-layer buffers of a few slots were on 4 KiB pages, and a decode step reads each
    // layer's states once, after the weight stream has evicted their translations: see core/arena.h).
    Buffer conv_, ssm_;
    Buffer verify_;  // [layer][seq][token][row]
    int32_t verify_seqs_ = 0;
    int64_t verify_tokens_ = 0, verify_row_ = 0;
};

}  // namespace gdn
