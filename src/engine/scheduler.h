// The scheduler: pure logic, no tensors. One token budget per step shared by running and waiting
// requests (decodes first, then prefill chunks), so chunked prefill falls out; FCFS admission;
// preemption by recompute when KV blocks run out. Unit-tested with fake requests and no model.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "cache/kv_cache.h"
#include "cache/state_slots.h"

namespace gdn {

struct SchedulerConfig {
    int max_num_seqs = 16;              // running requests at most
    int max_num_batched_tokens = 512;   // token budget per step
    int max_prefill_chunk = 512;        // prefill tokens per request per step
    int gdn_chunk = 64;                 // prefill chunks end on multiples of this unless at the prompt's end
};

enum class RequestStatus { WAITING, RUNNING, FINISHED };

// A request as the scheduler sees it: its tokens (prompt, then generated) and how many are computed.
struct SchedRequest {
    int64_t id = 0;
    std::vector<int32_t> tokens;   // prompt + generated so far
    int64_t num_prompt = 0;
    int64_t num_computed = 0;      // tokens whose KV / state are in the caches
    std::vector<int32_t> blocks;   // KV block table
    int32_t slot = -1;             // GDN state slot
    RequestStatus status = RequestStatus::WAITING;
    int64_t num_preemptions = 0;
    int64_t max_total_tokens = 0;  // prompt + max_tokens: blocks are never needed beyond this
    // Speculative decoding: draft tokens proposed after the last token (not part of `tokens`); a decode
    // step verifies those it is given (cleared when the request is pre-empted).
    std::vector<int32_t> drafts;
};

constexpr int kMaxScheduledDrafts = 8;

struct ScheduledChunk {
    SchedRequest* req;
    int64_t num_new;  // tokens [num_computed, num_computed + num_new) run this step (drafts included)
    int num_draft = 0;  // the last num_draft of them are drafts[0, num_draft): a verification
    // GDN state slots for the states after each draft (state after draft i in spare_slots[i]); the state
    // after the last real token stays in req->slot.
    int32_t spare_slots[kMaxScheduledDrafts] = {};
};

struct SchedulerOutput {
    std::vector<ScheduledChunk> chunks;  // decodes first, then prefills, in a stable order
    std::vector<int64_t> preempted;      // ids preempted this step (their progress was reset)
    int64_t n_tokens = 0;
};

class Scheduler {
public:
    Scheduler(const SchedulerConfig& cfg, BlockPool& blocks, StateSlots* slots, int32_t n_slots, int32_t block_size);

    void add(std::shared_ptr<SchedRequest> r);
    // Plans one step. The output's pointers stay valid until the next call of schedule() / finish().
    const SchedulerOutput& schedule();
    // After the step ran: the chunk's tokens are now computed.
    void on_computed(const ScheduledChunk& c) { c.req->num_computed += c.num_new; }
    // After a verification: the real token and the first n_accepted drafts are computed; the request
    // continues from the state after them (its slot, or spare n_accepted - 1); the other slots are freed.
    void on_verified(const ScheduledChunk& c, int n_accepted);
    // KV blocks for the first n_tokens positions of a running request if the pool has them (no
    // preemption); false when only some could be taken (they stay with the request).
    bool reserve_blocks(SchedRequest& r, int64_t n_tokens) { return ensure_blocks(r, std::min(n_tokens, r.max_total_tokens)); }
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
    int32_t alloc_slot();
    void release_slot(int32_t s);
    bool ensure_blocks(SchedRequest& r, int64_t n_tokens);  // blocks for the first n_tokens positions
    void release(SchedRequest& r);
    void preempt_request(std::shared_ptr<SchedRequest> r);

    SchedulerConfig cfg_;
    BlockPool& blocks_;
    StateSlots* slots_;               // null in logic-only tests: slots are then counted here
    int32_t fake_free_slots_;
    std::vector<int32_t> fake_slot_free_list_;
    int32_t block_size_;
    std::vector<std::shared_ptr<SchedRequest>> running_;
    std::deque<std::shared_ptr<SchedRequest>> waiting_;
    SchedulerOutput out_;
    int64_t total_preemptions_ = 0;
};

}  // namespace gdn
