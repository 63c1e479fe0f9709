#include "engine/scheduler.h"

#include <algorithm>

#include "core/log.h"

namespace gdn {

Scheduler::Scheduler(const SchedulerConfig& cfg, BlockPool& blocks, StateSlots* slots, int32_t n_slots,
                     int32_t block_size)
    : cfg_(cfg), blocks_(blocks), slots_(slots), fake_free_slots_(n_slots), block_size_(block_size) {
    GDN_CHECK(cfg.max_num_batched_tokens >= cfg.max_num_seqs + cfg.gdn_chunk,
              "max_num_batched_tokens must leave room for one GDN chunk besides the decodes");
    for (int32_t s = n_slots - 1; s >= 0; --s) fake_slot_free_list_.push_back(s);
}

int32_t Scheduler::alloc_slot() {
    if (slots_) return slots_->allocate();
    if (fake_slot_free_list_.empty()) return -1;
    const int32_t s = fake_slot_free_list_.back();
    fake_slot_free_list_.pop_back();
    --fake_free_slots_;
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
    for (int32_t b : r.blocks) blocks_.release(b);
    r.blocks.clear();
    if (r.slot >= 0) release_slot(r.slot);
    r.slot = -1;
}

void Scheduler::on_verified(const ScheduledChunk& c, int n_accepted) {
    SchedRequest& r = *c.req;
    GDN_CHECK(n_accepted >= 0 && n_accepted <= c.num_draft);
    r.num_computed += c.num_new - c.num_draft + n_accepted;
    const int32_t keep = n_accepted == 0 ? r.slot : c.spare_slots[n_accepted - 1];
    if (r.slot != keep) release_slot(r.slot);
    for (int i = 0; i < c.num_draft; ++i)
        if (c.spare_slots[i] != keep) release_slot(c.spare_slots[i]);
    r.slot = keep;
    r.drafts.clear();
}

void Scheduler::preempt_request(std::shared_ptr<SchedRequest> r) {
    // Recompute: drop its caches and progress; it goes back to the front of the queue with its tokens.
    release(*r);
    r->drafts.clear();
    r->num_computed = 0;
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
    out_.n_tokens = 0;
    int64_t budget = cfg_.max_num_batched_tokens;
    // Size of the next chunk of r within `avail` tokens: a prefill chunk ends on a GDN chunk boundary
    // unless it reaches the end of the known tokens (so continuing a prefill is exact and cheap).
    auto chunk_size = [&](const SchedRequest& r, int64_t avail) -> int64_t {
        const int64_t remaining = static_cast<int64_t>(r.tokens.size()) - r.num_computed;
        int64_t n = std::min<int64_t>({remaining, avail, cfg_.max_prefill_chunk});
        if (n < remaining && remaining > 1) {
            const int64_t end = (r.num_computed + n) / cfg_.gdn_chunk * cfg_.gdn_chunk;
            n = std::max<int64_t>(0, end - r.num_computed);
        }
        return n;
    };
    // 1. Running requests (decodes, and prefills in progress), oldest first.
    for (size_t i = 0; i < running_.size() && budget > 0;) {
        auto r = running_[i];
        const int64_t n = chunk_size(*r, budget);
        if (n <= 0) {
            ++i;
            continue;
        }
        if (!ensure_blocks(*r, r->num_computed + n)) {
            // Out of KV blocks: pre-empt the newest running request (possibly r itself) and retry.
            auto victim = running_.back();
            running_.pop_back();
            // Its chunk, if already scheduled this step, is withdrawn.
            for (size_t c = 0; c < out_.chunks.size(); ++c)
                if (out_.chunks[c].req == victim.get()) {
                    budget += out_.chunks[c].num_new;
                    out_.n_tokens -= out_.chunks[c].num_new;
                    for (int d = 0; d < out_.chunks[c].num_draft; ++d) release_slot(out_.chunks[c].spare_slots[d]);
                    out_.chunks.erase(out_.chunks.begin() + c);
                    break;
                }
            preempt_request(victim);
            continue;  // same i: r (if not the victim) retries with the freed blocks
        }
        ScheduledChunk c{r.get(), n};
        // A decode step carries the request's drafts as far as the budget, its KV blocks and the free
        // state slots allow (never pre-empting anyone for a draft).
        if (n == 1 && r->num_computed + 1 == static_cast<int64_t>(r->tokens.size()) && !r->drafts.empty()) {
            int64_t nd = std::min<int64_t>({static_cast<int64_t>(r->drafts.size()), budget - 1, kMaxScheduledDrafts,
                                            r->max_total_tokens - 1 - r->num_computed});
            if (nd > 0 && !ensure_blocks(*r, r->num_computed + 1 + nd))
                nd = static_cast<int64_t>(r->blocks.size()) * block_size_ - r->num_computed - 1;
            for (int64_t d = 0; d < nd; ++d) {
                const int32_t s = free_slots() > 0 ? alloc_slot() : -1;
                if (s < 0) {
                    nd = d;
                    break;
                }
                c.spare_slots[d] = s;
            }
            c.num_draft = static_cast<int>(std::max<int64_t>(0, nd));
            c.num_new += c.num_draft;
        }
        out_.chunks.push_back(c);
        out_.n_tokens += c.num_new;
        budget -= c.num_new;
        ++i;
    }
    // 2. Waiting requests, first come first served, while a slot, blocks and budget remain.
    while (!waiting_.empty() && budget > 0 && static_cast<int>(running_.size()) < cfg_.max_num_seqs) {
        auto r = waiting_.front();
        const int64_t n = chunk_size(*r, budget);
        if (n <= 0) break;
        if (free_slots() <= 0) break;
        if (!ensure_blocks(*r, r->num_computed + n)) {
            release(*r);  // partial allocation returned; it stays first in line
            break;
        }
        r->slot = alloc_slot();
        waiting_.pop_front();
        r->status = RequestStatus::RUNNING;
        running_.push_back(r);
        out_.chunks.push_back({r.get(), n});
        out_.n_tokens += n;
        budget -= n;
    }
    return out_;
}

}  // namespace gdn
