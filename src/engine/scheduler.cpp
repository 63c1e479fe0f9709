#include "engine/scheduler.h"

#include <algorithm>
#include <limits>

#include "core/log.h"

namespace gdn {

Scheduler::Scheduler(const SchedulerConfig& cfg, BlockPool& blocks, StateSlots* slots, int32_t n_slots,
                     int32_t block_size)
    : cfg_(cfg), blocks_(blocks), slots_(slots), fake_free_slots_(n_slots), block_size_(block_size) {
    GDN_CHECK(cfg.max_num_batched_tokens >= cfg.max_num_seqs + cfg.gdn_chunk,
              "max_num_batched_tokens must leave room for one GDN chunk besides the decodes");
    for (int32_t s = n_slots - 1; s >= 0; --s) fake_slot_free_list_.push_back(s);
}

int32_t Scheduler::alloc_slot(bool may_evict_snapshot) {
    int32_t s = -1;
    if (slots_) {
        s = slots_->allocate();
    } else if (!fake_slot_free_list_.empty()) {
        s = fake_slot_free_list_.back();
        fake_slot_free_list_.pop_back();
        --fake_free_slots_;
    }
    // A snapshot's slot goes straight to the caller (it stays allocated in the slot pool).
    if (s < 0 && may_evict_snapshot && snaps_) {
        s = snaps_->evict_one();
        if (s >= 0) pstats_.snapshot_evictions++;
    }
    return s;
}

void Scheduler::release_slot(int32_t s) {
    if (slots_) {
        slots_->release(s);
    } else {
        fake_slot_free_list_.push_back(s);
        ++fake_free_slots_;
    }
}

void Scheduler::enable_prefix_cache(SnapshotCache* snapshots) {
    GDN_CHECK(blocks_.block_size() == block_size_,
              "prefix caching needs a block pool with the scheduler's block size");
    snaps_ = snapshots;
    blocks_.set_eviction_listener([this](int32_t b) {
        const int32_t s = snaps_->remove(b);
        if (s >= 0) {
            release_slot(s);
            pstats_.snapshot_evictions++;
        }
    });
}

void Scheduler::add(std::shared_ptr<SchedRequest> r) {
    r->status = RequestStatus::WAITING;
    waiting_.push_back(std::move(r));
}

bool Scheduler::ensure_blocks(SchedRequest& r, int64_t n_tokens) {
    const int64_t need = (n_tokens + block_size_ - 1) / block_size_;
    while (static_cast<int64_t>(r.blocks.size()) < need) {
        const int32_t b = blocks_.allocate();
        if (b < 0) return false;
        r.blocks.push_back(b);
    }
    return true;
}

void Scheduler::release(SchedRequest& r) {
    // Last block first: the LRU then evicts a prefix's tail before its head (a head serves more prompts).
    for (auto it = r.blocks.rbegin(); it != r.blocks.rend(); ++it) blocks_.release(*it);
    r.blocks.clear();
    if (r.slot >= 0) release_slot(r.slot);
    r.slot = -1;
    r.num_committed = 0;
    r.chain_tail = -1;
    r.rolling_block = -1;
}

// The longest cached prefix of r's known tokens that ends in a snapshot, leaving at least one token to
// compute (its logits are needed): its blocks join r's table, r starts after them.
void Scheduler::lookup_prefix(SchedRequest& r) {
    if (!snaps_ || r.num_computed != 0 || !r.blocks.empty() || r.prompt_rows) return;
    const int64_t n = static_cast<int64_t>(r.tokens.size());
    chain_.clear();
    int32_t parent = -1;
    int64_t best = 0;
    for (int64_t i = 0; (i + 1) * block_size_ <= n - 1; ++i) {
        const int32_t b = blocks_.find(parent, r.tokens.data() + i * block_size_);
        if (b < 0) break;
        chain_.push_back(b);
        parent = b;
        if (snaps_->slot_of(b) >= 0) best = i + 1;
    }
    for (int64_t i = 0; i < best; ++i) {
        blocks_.acquire(chain_[i]);
        r.blocks.push_back(chain_[i]);
    }
    r.num_computed = r.num_cached = best * block_size_;
    r.num_committed = static_cast<int32_t>(best);
    r.chain_tail = best > 0 ? chain_[best - 1] : -1;
    if (best > 0) snaps_->pin(r.chain_tail);  // until the restore copy is done
}

// Registers r's blocks that are now fully computed, each after the one before it.
void Scheduler::commit_blocks(SchedRequest& r) {
    if (!snaps_) return;
    const int64_t full = r.num_computed / block_size_;
    while (r.num_committed < full && r.chain_tail != -2) {
        const int32_t i = r.num_committed;
        const int32_t parent = i == 0 ? -1 : r.chain_tail;
        const int32_t* toks = r.tokens.data() + static_cast<int64_t>(i) * block_size_;
        if (blocks_.commit(r.blocks[i], parent, toks)) {
            r.chain_tail = r.blocks[i];
        } else {  // an identical block is registered (r keeps its private copy), or the chain was evicted
            const int32_t f = blocks_.find(parent, toks);
            r.chain_tail = f >= 0 ? f : -2;
        }
        ++r.num_committed;
    }
}

bool Scheduler::wants_snapshot(const SchedRequest& r) const {
    return snaps_ && snaps_->capacity() > 0 && r.num_computed > 0 && r.num_computed % block_size_ == 0 &&
           r.num_committed == r.num_computed / block_size_ && r.chain_tail >= 0 &&
           snaps_->slot_of(r.chain_tail) < 0;
}

// Room for one more snapshot: true if there is some; *freed is a slot an eviction gave up (still
// allocated: the caller reuses or releases it), or -1. False when the cache is full of pinned snapshots.
bool Scheduler::make_snapshot_room(int32_t* freed) {
    *freed = -1;
    if (!snaps_->full()) return true;
    *freed = snaps_->evict_one();
    if (*freed < 0) return false;
    pstats_.snapshot_evictions++;
    return true;
}

// Keeps r's state at num_computed as the snapshot of its prefix, as a copy of r.slot the engine makes
// after this step.
void Scheduler::snapshot_by_copy(SchedRequest& r) {
    int32_t s;
    if (!wants_snapshot(r) || !make_snapshot_room(&s)) return;
    if (s < 0) s = alloc_slot();
    if (s < 0) return;
    copies_.push_back({r.slot, s});
    snaps_->add(r.chain_tail, s);
    pstats_.snapshots_taken++;
}

// Keeps r's state at num_computed, which is in `slot` (no longer r's), as the snapshot of its prefix; the
// slot is released when it is not wanted. One provisional decode snapshot per request: it replaces the
// previous one unless that was hit.
void Scheduler::snapshot_by_adoption(SchedRequest& r, int32_t slot) {
    if (r.rolling_block >= 0 && snaps_->slot_of(r.rolling_block) >= 0 && !snaps_->was_hit(r.rolling_block))
        release_slot(snaps_->remove(r.rolling_block));
    r.rolling_block = -1;
    int32_t freed;
    if (!wants_snapshot(r) || !make_snapshot_room(&freed)) {
        release_slot(slot);
        return;
    }
    if (freed >= 0) release_slot(freed);
    snaps_->add(r.chain_tail, slot);
    r.rolling_block = r.chain_tail;
    pstats_.snapshots_taken++;
}

void Scheduler::on_computed(const ScheduledChunk& c) {
    SchedRequest& r = *c.req;
    if (c.fresh_slot >= 0) {  // r.slot holds the state at num_computed, the step's result is in fresh_slot
        const int32_t old = r.slot;
        r.slot = c.fresh_slot;
        snapshot_by_adoption(r, old);
    }
    r.num_computed += c.num_new;
    commit_blocks(r);
    if (snaps_ && std::binary_search(r.snapshot_at.begin(), r.snapshot_at.end(), r.num_computed))
        snapshot_by_copy(r);
}

void Scheduler::on_verified(const ScheduledChunk& c, int n_accepted) {
    SchedRequest& r = *c.req;
    GDN_CHECK(n_accepted >= 0 && n_accepted <= c.num_draft);
    // The commit left the state after the accepted tokens in fresh_slot when r.slot is to become a
    // snapshot, else in place: as a plain chunk of the real token and the accepted drafts.
    r.drafts.clear();
    ScheduledChunk accepted = c;
    accepted.num_new = c.num_new - c.num_draft + n_accepted;
    accepted.num_draft = 0;
    on_computed(accepted);
}

void Scheduler::preempt_request(std::shared_ptr<SchedRequest> r) {
    // Recompute: drop its caches and progress; it goes back to the front of the queue with its tokens.
    release(*r);
    r->drafts.clear();
    r->num_computed = r->num_cached = 0;
    r->status = RequestStatus::WAITING;
    r->num_preemptions++;
    total_preemptions_++;
    out_.preempted.push_back(r->id);
    waiting_.push_front(std::move(r));
}

bool Scheduler::preempt(int64_t id) {
    auto it = std::find_if(running_.begin(), running_.end(), [&](auto& r) { return r->id == id; });
    if (it == running_.end()) return false;
    auto r = *it;
    running_.erase(it);
    preempt_request(std::move(r));
    return true;
}

void Scheduler::finish(int64_t id) {
    auto it = std::find_if(running_.begin(), running_.end(), [&](auto& r) { return r->id == id; });
    if (it != running_.end()) {
        release(**it);
        (*it)->status = RequestStatus::FINISHED;
        running_.erase(it);
        return;
    }
    auto w = std::find_if(waiting_.begin(), waiting_.end(), [&](auto& r) { return r->id == id; });
    if (w != waiting_.end()) {
        release(**w);
        (*w)->status = RequestStatus::FINISHED;
        waiting_.erase(w);
    }
}

const SchedulerOutput& Scheduler::schedule() {
    out_.chunks.clear();
    out_.preempted.clear();
    out_.restores.clear();
    out_.n_tokens = 0;
    int64_t budget = cfg_.max_num_batched_tokens;
    // Size of the next chunk of r within `avail` tokens: a prefill chunk ends on a GDN chunk boundary
    // unless it reaches the end of the known tokens (so continuing a prefill is exact and cheap).
    auto chunk_size = [&](const SchedRequest& r, int64_t avail) -> int64_t {
        const int64_t remaining = static_cast<int64_t>(r.tokens.size()) - r.num_computed;
        int64_t n = std::min<int64_t>({remaining, avail, cfg_.max_prefill_chunk});
        if (r.prompt_rows) n = std::min<int64_t>(n, cfg_.gdn_chunk);
        if (n < remaining && remaining > 1) {
            const int64_t end = (r.num_computed + n) / cfg_.gdn_chunk * cfg_.gdn_chunk;
            n = std::max<int64_t>(0, end - r.num_computed);
        }
        // ... and at the request's next snapshot position, whose state is kept after the step.
        auto q = std::upper_bound(r.snapshot_at.begin(), r.snapshot_at.end(), r.num_computed);
        if (snaps_ && q != r.snapshot_at.end() && *q < r.num_computed + n) n = *q - r.num_computed;
        return n;
    };
    // A running request's tokens still to compute: 1 for a decode (its last sampled token).
    auto left = [](const SchedRequest& r) { return static_cast<int64_t>(r.tokens.size()) - r.num_computed; };
    // Prefills in progress leave one token to every decode of the step (a long prompt's chunks no longer
    // delay the running requests' next tokens) and, while prompts wait for a free seat,
    // admit_prompt_tokens to them (a long prefill no longer holds every newcomer back until it ends; it
    // takes smaller chunks meanwhile, at least one GDN chunk where the budget allows).
    int64_t decodes_left = 0;
    for (const auto& r : running_) decodes_left += left(*r) == 1;
    const bool seats = !waiting_.empty() && static_cast<int>(running_.size()) < cfg_.max_num_seqs;
    const int64_t reserve = seats ? cfg_.admit_prompt_tokens : 0;
    // While requests decode, the step's prefill tokens stay within `room` (prefill_room_with_decodes, at
    // least one GDN chunk), waiting prompts first: a prefill in progress takes what they leave (at least
    // one GDN chunk); the first waiting prompt may take admit_prompt_tokens even beyond it, so a short
    // prompt still gets its first token from one step.
    int64_t room = std::numeric_limits<int64_t>::max();
    if (decodes_left > 0 && cfg_.prefill_room_with_decodes > 0)
        room = std::max<int64_t>(cfg_.prefill_room_with_decodes, cfg_.gdn_chunk);
    // 1. Running requests (decodes, and prefills in progress), oldest first.
    for (size_t i = 0; i < running_.size() && budget > 0;) {
        auto r = running_[i];
        const bool prefill = left(*r) > 1;
        int64_t avail = budget;
        if (prefill) {
            const int64_t beside_decodes = budget - decodes_left;
            avail = std::max(std::min(beside_decodes, room) - reserve,
                             std::min<int64_t>(beside_decodes, cfg_.gdn_chunk));
        }
        const int64_t n = chunk_size(*r, avail);
        if (n <= 0) {
            ++i;
            continue;
        }
        if (!ensure_blocks(*r, r->num_computed + n)) {
            // Out of KV blocks: pre-empt the newest running request (possibly r itself) and retry.
            auto victim = running_.back();
            running_.pop_back();
            // Its chunk, if already scheduled this step, is withdrawn.
            bool scheduled = false;
            for (size_t c = 0; c < out_.chunks.size(); ++c)
                if (out_.chunks[c].req == victim.get()) {
                    budget += out_.chunks[c].num_new;
                    out_.n_tokens -= out_.chunks[c].num_new;
                    if (out_.chunks[c].fresh_slot >= 0) release_slot(out_.chunks[c].fresh_slot);
                    out_.chunks.erase(out_.chunks.begin() + c);
                    scheduled = true;
                    break;
                }
            if (!scheduled && left(*victim) == 1) --decodes_left;  // a decode that will not run this step
            preempt_request(victim);
            continue;  // same i: r (if not the victim) retries with the freed blocks
        }
        if (!prefill) --decodes_left;
        ScheduledChunk c{r.get(), n};
        // A decode step carries the request's drafts as far as the budget and its KV blocks allow (never
        // pre-empting anyone for a draft).
        if (!prefill && !r->drafts.empty()) {
            int64_t nd = std::min<int64_t>({static_cast<int64_t>(r->drafts.size()), budget - 1 - decodes_left,
                                            kMaxScheduledDrafts, r->max_total_tokens - 1 - r->num_computed});
            if (nd > 0 && !ensure_blocks(*r, r->num_computed + 1 + nd))
                nd = static_cast<int64_t>(r->blocks.size()) * block_size_ - r->num_computed - 1;
            c.num_draft = static_cast<int>(std::max<int64_t>(0, nd));
            c.num_new += c.num_draft;
        }
        // A decode step at a block boundary keeps the state there as a snapshot (no copy: the step writes
        // its result to a fresh slot).
        if (!prefill && wants_snapshot(*r)) c.fresh_slot = alloc_slot(/*may_evict_snapshot=*/true);
        out_.chunks.push_back(c);
        out_.n_tokens += c.num_new;
        budget -= c.num_new;
        if (prefill) room -= std::min(room, n);
        ++i;
    }
    // 2. Waiting requests, first come first served, while a slot, blocks and budget remain, and while the
    // prompt tokens started this step stay within admit_prompt_tokens (the first one always starts).
    int64_t admitted = 0;
    while (!waiting_.empty() && budget > 0 && static_cast<int>(running_.size()) < cfg_.max_num_seqs) {
        auto r = waiting_.front();
        if (free_slots() <= 0 && !(snaps_ && snaps_->size() > 0)) break;
        lookup_prefix(*r);  // prefix caching: r may start after cached blocks
        const int64_t first_room =
            std::max<int64_t>(room, std::max(cfg_.admit_prompt_tokens, cfg_.gdn_chunk));
        const int64_t n = chunk_size(*r, std::min(budget, admitted == 0 ? first_room : room));
        const bool over =
            admitted > 0 && cfg_.admit_prompt_tokens > 0 && admitted + n > cfg_.admit_prompt_tokens;
        const int32_t slot = !over && n > 0 && ensure_blocks(*r, r->num_computed + n)
                                 ? alloc_slot(/*may_evict_snapshot=*/true)
                                 : -1;
        if (slot < 0) {
            release(*r);  // blocks (and any cache hit) returned; it stays first in line
            r->num_computed = r->num_cached = 0;
            break;
        }
        admitted += n;
        r->slot = slot;
        if (r->num_cached > 0) {
            out_.restores.push_back({snaps_->slot_of(r->chain_tail), r->slot});
            snaps_->mark_hit(r->chain_tail);
        }
        if (snaps_) {
            pstats_.query_tokens += static_cast<int64_t>(r->tokens.size());
            pstats_.hit_tokens += r->num_cached;
        }
        waiting_.pop_front();
        r->status = RequestStatus::RUNNING;
        running_.push_back(r);
        out_.chunks.push_back({r.get(), n});
        out_.n_tokens += n;
        budget -= n;
        room -= std::min(room, n);
    }
    return out_;
}

PrefixCacheStats Scheduler::prefix_stats() const {
    PrefixCacheStats s = pstats_;
    s.block_evictions = blocks_.evictions();
    s.snapshots = snaps_ ? snaps_->size() : 0;
    s.snapshot_capacity = snaps_ ? snaps_->capacity() : 0;
    s.cached_blocks = blocks_.n_cached();
    return s;
}

void Scheduler::clear_prefix_cache() {
    if (!snaps_) return;
    blocks_.clear_cache();  // unused blocks: their snapshots go with them (the eviction listener)
    for (int32_t b = 0; b < blocks_.n_blocks(); ++b) {
        const int32_t s = snaps_->slot_of(b);
        if (s >= 0) release_slot(snaps_->remove(b));
    }
    for (auto& r : running_) r->rolling_block = -1;
}

}  // namespace gdn
