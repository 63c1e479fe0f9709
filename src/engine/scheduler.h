// The scheduler: pure logic, no tensors. One token budget per step shared by running and waiting
// requests (decodes first, then prefill chunks), so chunked prefill falls out; FCFS admission;
// preemption by recompute when KV blocks run out. With prefix caching (enable_prefix_cache) an admitted
// request starts after the longest cached prefix that ends in a GDN state snapshot, full blocks are
// registered as they are computed, and states are kept at the request's snapshot positions (the engine
// performs the copies the scheduler lists). Unit-tested with fake requests and no model.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "cache/kv_cache.h"
#include "cache/snapshot_cache.h"
#include "cache/state_slots.h"

namespace gdn {

// Prefill chunks end on multiples of this many tokens unless they reach the end of the known tokens (the
// chunked GDN form's chunk; continuing a prefill there is exact), so a step's token budget must leave
// room for one such chunk beside the decodes. One source for the engine, the scheduler and the tools.
constexpr int kPrefillChunkAlign = 64;

struct SchedulerConfig {
    int max_num_seqs = 16;             // running requests at most
    int max_num_batched_tokens = 512;  // token budget per step
    int max_prefill_chunk = 512;       // prefill tokens per request per step
    // A step starts waiting prompts while their prefill tokens in it stay within this (the first one
    // always starts, with the whole remaining budget; 0: no limit). A burst of prompts then gets its
    // first tokens one or two prompts at a time instead of all at the end of one long step.
    int admit_prompt_tokens = 128;
    // While requests decode, a step's prefill tokens stay within this (at least one GDN chunk; 0: no
    // limit), so the running requests' next tokens do not wait for a long prompt's big chunks. The
    // engine sets it from a step-time target and the prefill rate it measures (set_prefill_room).
    int prefill_room_with_decodes = 0;
    int gdn_chunk = kPrefillChunkAlign;  // prefill chunks end on multiples of this unless at the prompt's end
};

enum class RequestStatus { WAITING, RUNNING, FINISHED };

// A request as the scheduler sees it: its tokens (prompt, then generated) and how many are computed.
struct SchedRequest {
    int64_t id = 0;
    std::vector<int32_t> tokens;  // prompt + generated so far
    int64_t num_prompt = 0;
    int64_t num_computed = 0;     // tokens whose KV / state are in the caches
    std::vector<int32_t> blocks;  // KV block table
    int32_t slot = -1;            // GDN state slot
    RequestStatus status = RequestStatus::WAITING;
    int64_t num_preemptions = 0;
    int64_t max_total_tokens = 0;  // prompt + max_tokens: blocks are never needed beyond this
    // Speculative decoding: draft tokens proposed after the last token (not part of `tokens`); a decode
    // step verifies those it is given (cleared when the request is pre-empted).
    std::vector<int32_t> drafts;
    // Prefix caching. Positions (multiples of the block size, ascending, in (0, num_prompt]) whose GDN
    // state is kept as a snapshot: prefill chunks end there. Set by the engine before add().
    std::vector<int64_t> snapshot_at;
    int64_t num_cached = 0;     // tokens taken from the prefix cache at the last admission
    int32_t num_committed = 0;  // leading blocks whose identity is settled (registered or a duplicate)
    int32_t chain_tail = -1;    // the registered block standing for blocks[0, num_committed) (-2: chain lost)
    int32_t rolling_block = -1;  // block carrying this request's latest decode-time snapshot
    // Prompt logprobs: every prompt row's logits are needed, so no prefix-cache hit, and prefill chunks
    // of at most one GDN chunk (their [rows, V] logits stay small). Cleared once they are computed.
    bool prompt_rows = false;
};

// A state copy between GDN state slots that the engine performs (prefix-cache snapshot or restore).
struct SlotCopy {
    int32_t from, to;
};

struct PrefixCacheStats {
    int64_t query_tokens = 0;  // prompt tokens of admitted requests (recomputes after preemption included)
    int64_t hit_tokens = 0;    // of them, taken from the cache
    int64_t snapshots_taken = 0;
    int64_t snapshot_evictions = 0;
    int64_t block_evictions = 0;
    int32_t snapshots = 0;  // held now
    int32_t snapshot_capacity = 0;
    int32_t cached_blocks = 0;  // registered blocks now (in use or in the LRU)
};

constexpr int kMaxScheduledDrafts = 8;

struct ScheduledChunk {
    SchedRequest* req;
    int64_t num_new;  // tokens [num_computed, num_computed + num_new) run this step (drafts included)
    // The last num_draft of them are drafts[0, num_draft): a verification. Its forward leaves the GDN
    // state in req->slot as it was; the engine commits the accepted tokens' states after sampling.
    int num_draft = 0;
    // Prefix caching, decode steps at a block boundary: the state after this step (or the commit of a
    // verification) goes to fresh_slot and req->slot (the state at num_computed) becomes a snapshot,
    // with no copy. -1: in place.
    int32_t fresh_slot = -1;
};

struct SchedulerOutput {
    std::vector<ScheduledChunk> chunks;  // decodes first, then prefills, in a stable order
    std::vector<int64_t> preempted;      // ids preempted this step (their progress was reset)
    std::vector<SlotCopy> restores;      // prefix-cache hits: snapshot -> request slot, before the forward
    int64_t n_tokens = 0;
};

class Scheduler {
  public:
    Scheduler(const SchedulerConfig& cfg, BlockPool& blocks, StateSlots* slots, int32_t n_slots,
              int32_t block_size);

    // Turns prefix caching on: `snapshots` tracks the snapshots (held in state slots of this scheduler's
    // pool) and the block pool's registrations are used for lookups.
    void enable_prefix_cache(SnapshotCache* snapshots);
    bool prefix_caching() const { return snaps_ != nullptr; }
    void add(std::shared_ptr<SchedRequest> r);
    // SchedulerConfig::prefill_room_with_decodes from now on.
    void set_prefill_room(int tokens) { cfg_.prefill_room_with_decodes = tokens; }
    // Plans one step. The output's pointers stay valid until the next call of schedule() / finish().
    const SchedulerOutput& schedule();
    // After the step ran: the chunk's tokens are now computed.
    void on_computed(const ScheduledChunk& c);
    // After a verification and its commit: the real token and the first n_accepted drafts are computed;
    // the request continues from the state after them (in its slot, or in fresh_slot).
    void on_verified(const ScheduledChunk& c, int n_accepted);
    // KV blocks for the first n_tokens positions of a running request if the pool has them (no
    // preemption); false when only some could be taken (they stay with the request).
    bool reserve_blocks(SchedRequest& r, int64_t n_tokens) {
        return ensure_blocks(r, std::min(n_tokens, r.max_total_tokens));
    }
    // State copies (snapshots) the engine must do now, after on_computed / on_verified; cleared by the call.
    std::vector<SlotCopy>& pending_copies() { return copies_; }
    // After the engine did this step's restores: their snapshots may be evicted again.
    void restores_done() {
        if (snaps_) snaps_->unpin_all();
    }
    PrefixCacheStats prefix_stats() const;
    // Drops every unused cached block and snapshot (the pools return to their initial state when idle).
    void clear_prefix_cache();
    int32_t block_size() const { return block_size_; }
    // Finished or aborted: releases its blocks and slot, removes it.
    void finish(int64_t id);
    // Pre-empts a running request by recompute (also used by tests to force preemption).
    bool preempt(int64_t id);

    int n_running() const { return static_cast<int>(running_.size()); }
    int n_waiting() const { return static_cast<int>(waiting_.size()); }
    bool empty() const { return running_.empty() && waiting_.empty(); }
    int64_t total_preemptions() const { return total_preemptions_; }
    const BlockPool& blocks() const { return blocks_; }
    int32_t free_slots() const { return slots_ ? slots_->n_free() : fake_free_slots_; }

  private:
    int32_t alloc_slot(bool may_evict_snapshot = false);
    void release_slot(int32_t s);
    // Prefix caching (no-ops when off).
    void lookup_prefix(SchedRequest& r);
    void commit_blocks(SchedRequest& r);
    bool wants_snapshot(const SchedRequest& r) const;
    bool make_snapshot_room(int32_t* freed);
    void snapshot_by_copy(SchedRequest& r);
    void snapshot_by_adoption(SchedRequest& r, int32_t slot);
    bool ensure_blocks(SchedRequest& r, int64_t n_tokens);  // blocks for the first n_tokens positions
    void release(SchedRequest& r);
    void preempt_request(std::shared_ptr<SchedRequest> r);

    SchedulerConfig cfg_;
    BlockPool& blocks_;
    StateSlots* slots_;  // null in logic-only tests: slots are then counted here
    int32_t fake_free_slots_;
    std::vector<int32_t> fake_slot_free_list_;
    int32_t block_size_;
    std::vector<std::shared_ptr<SchedRequest>> running_;
    std::deque<std::shared_ptr<SchedRequest>> waiting_;
    SchedulerOutput out_;
    int64_t total_preemptions_ = 0;
    SnapshotCache* snaps_ = nullptr;
    std::vector<SlotCopy> copies_;
    std::vector<int32_t> chain_;  // lookup scratch
    PrefixCacheStats pstats_;
};

}  // namespace gdn
