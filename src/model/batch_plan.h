// BatchPlan: everything a forward step needs, built on the host by the engine each step (principle 1 of
// the design). The model forward consumes the plan and the caches and nothing else; it never reads back
// device memory to decide anything.
#pragma once

#include <cstdint>
#include <vector>

namespace gdn {

struct BatchPlan {
    std::vector<int32_t> token_ids;          // [N] tokens of all sequences, back to back
    std::vector<int64_t> positions;          // [N]
    std::vector<int64_t> cu_seqlens;         // [S + 1] sequence s owns rows [cu[s], cu[s+1])
    std::vector<int32_t> state_slot;         // [S] GDN state slot
    std::vector<uint8_t> has_initial_state;  // [S] from the request's computed-token count, never the state
    std::vector<int32_t> block_tables;       // [S, max_blocks] KV block ids (row-major, -1 padded)
    int64_t max_blocks = 0;
    std::vector<int64_t> slot_mapping;       // [N] KV arena row for each new token
    std::vector<int64_t> logits_rows;        // rows whose logits are returned, in order

    int64_t n_tokens() const { return static_cast<int64_t>(token_ids.size()); }
    int64_t n_seqs() const { return cu_seqlens.empty() ? 0 : static_cast<int64_t>(cu_seqlens.size()) - 1; }
    void clear() {
        token_ids.clear();
        positions.clear();
        cu_seqlens.clear();
        state_slot.clear();
        has_initial_state.clear();
        block_tables.clear();
        slot_mapping.clear();
        logits_rows.clear();
        max_blocks = 0;
    }
};

}  // namespace gdn
