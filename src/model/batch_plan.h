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
    std::vector<int64_t> slot_mapping;  // [N] KV arena row for each new token
    std::vector<int64_t> logits_rows;   // rows whose logits are returned, in order
    // Sequence s's tokens send their GDN states (conv window and recurrent state after each token) to the
    // slots gdn_out_slot[gdn_out_offset[s] ..] (one per token): a decode step whose input state becomes a
    // prefix-cache snapshot. An empty range (or empty vectors): in place, as usual.
    std::vector<int64_t> gdn_out_offset;  // [S + 1] or empty
    std::vector<int32_t> gdn_out_slot;    // [sum of those sequences' tokens]
    // Speculative verification: gdn_verify[s] != 0 leaves sequence s's GDN state as it was and stages its
    // GDN input rows (StateSlots::verify_rows, at index s) for Model::commit_verified. Empty: none.
    std::vector<uint8_t> gdn_verify;  // [S] or empty

    // Appends one sequence's row of block_tables: its blocks, -1 up to max_blocks.
    void push_block_table(const std::vector<int32_t>& blocks) {
        for (int64_t b = 0; b < max_blocks; ++b)
            block_tables.push_back(b < static_cast<int64_t>(blocks.size()) ? blocks[b] : -1);
    }

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
        gdn_out_offset.clear();
        gdn_out_slot.clear();
        gdn_verify.clear();
        max_blocks = 0;
    }
};

}  // namespace gdn
