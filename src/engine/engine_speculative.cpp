// The engine's draft-verify loop (engine.h): verifying a chunk's drafts against the target model,
// keeping the MTP layer's inputs, and proposing the next step's drafts (MTP or prompt lookup).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

#include "core/clock.h"
#include "core/log.h"
#include "engine/engine.h"
#include "engine/engine_request.h"

namespace gdn {

namespace {

// While the engine speculates, a request's pending MTP rows are run once this many have gathered even
// when it drafts nothing (a prefill chunk), so they stay few.
constexpr int64_t kMtpCatchUpRows = 64;
}  // namespace

void Engine::decide(const ScheduledChunk& c, size_t row, bool all_greedy, Verdict& v) {
    Request& r = *requests_.at(c.req->id);
    const int nd = c.num_draft;
    const int32_t V = model_->config().vocab;
    const std::vector<int32_t>& drafts = c.req->drafts;
    const bool want_lp = r.params.logprobs >= 0;
    // Row i of the chunk holds the target distribution after the real token and drafts [0, i): it
    // verifies draft i (i < nd), or gives the bonus token (i = nd). A draft d is a deterministic proposal,
    // accepted with probability p(d) (1 or 0 for greedy requests); on rejection the token is drawn from p
    // without d, renormalised. Either way the emitted token is distributed exactly as p (p(d) [x = d] +
    // (1 - p(d)) p(x) / (1 - p(d)) [x != d] = p(x)), and penalties, min_tokens and the RNG see the tokens
    // before it, as in plain decoding.
    v.tokens.clear();
    if (v.logprobs.size() < static_cast<size_t>(nd + 1)) v.logprobs.resize(nd + 1);
    const size_t out_before = r.output.size();
    int accepted = 0;
    for (int i = 0; i <= nd; ++i) {
        int32_t tok;
        bool ok = false;
        if (all_greedy) {
            tok = greedy_ids_[row + i];
            ok = i < nd && tok == drafts[i];
        } else {
            sampler_.prepare(logits_.data() + (row + i) * V, V, r.params, r.sampler, r.prompt, r.output,
                             eos_ids_);
            if (i < nd) {
                const double p = sampler_.prob(drafts[i]);
                ok = r.params.greedy() ? p > 0.5
                                       : std::uniform_real_distribution<double>(0.0, 1.0)(r.sampler.rng) < p;
                tok = ok ? drafts[i] : sampler_.draw(r.sampler, drafts[i]);
            } else {
                tok = sampler_.draw(r.sampler);
            }
            if (want_lp) sampler_.logprobs(tok, &v.logprobs[i]);
        }
        v.tokens.push_back(tok);
        r.output.push_back(tok);  // the context of the next row (penalties, min_tokens)
        if (i < nd) cost_.observe_acceptance(i, ok);
        if (!ok) break;
        ++accepted;
    }
    r.output.resize(out_before);
    spec_.count(nd, accepted);
    v.accepted = accepted;
}

void Engine::apply_verdict(const ScheduledChunk& c, Verdict& v, RequestOutput& out) {
    Request& r = *requests_.at(c.req->id);
    const bool want_lp = r.params.logprobs >= 0;
    // The state after the real token and the accepted drafts (committed) becomes the request's.
    scheduler_->on_verified(c, v.accepted);
    for (size_t i = 0; i < v.tokens.size() && r.finish == FinishReason::NONE; ++i)
        emit(r, v.tokens[i], want_lp ? &v.logprobs[i] : nullptr, out);
}

void Engine::keep_mtp_rows(Request& r, int64_t first_pos, int64_t plan_row, int64_t n_rows) {
    const int64_t H = model_->config().hidden;
    int64_t have = static_cast<int64_t>(r.mtp_hidden.size()) / H;
    // Pending rows are the slots [mtp_done, mtp_done + have). A recompute after preemption restarts
    // earlier: the rows (and MTP KV slots) from first_pos on are redone.
    if (first_pos < r.mtp_done) {
        r.mtp_done = first_pos;
        have = 0;
    } else if (first_pos < r.mtp_done + have) {
        have = first_pos - r.mtp_done;
    } else if (first_pos > r.mtp_done + have) {  // a prefix-cache hit: the cached blocks hold those rows
        r.mtp_done = first_pos;
        have = 0;
    }
    r.mtp_hidden.resize(have * H);
    if (r.mtp_stale) return;
    if (!speculating_ &&
        have + n_rows > kMaxPendingMtpRows) {  // see kMaxPendingMtpRows (speculating: caught up this step)
        r.mtp_stale = true;
        recycle_mtp_rows(r);
        return;
    }
    if (r.mtp_hidden.capacity() == 0 && !spare_mtp_rows_.empty()) {  // have == 0; pool buffers are empty
        r.mtp_hidden = std::move(spare_mtp_rows_.back());
        spare_mtp_rows_.pop_back();
    }
    const size_t want = static_cast<size_t>((have + n_rows) * H);
    if (want > r.mtp_hidden.capacity())  // whole huge pages at a time (core/huge_page_allocator.h)
        r.mtp_hidden.reserve(
            std::max(2 * r.mtp_hidden.capacity(), (want + HugePageAllocator<float>::kPerPage - 1) /
                                                      HugePageAllocator<float>::kPerPage *
                                                      HugePageAllocator<float>::kPerPage));
    r.mtp_hidden.insert(r.mtp_hidden.end(), hidden_.begin() + plan_row * H,
                        hidden_.begin() + (plan_row + n_rows) * H);
}

void Engine::recycle_mtp_rows(Request& r) {
    if (r.mtp_hidden.capacity() == 0) return;
    r.mtp_hidden.clear();
    if (spare_mtp_rows_.size() < static_cast<size_t>(cfg_.max_num_seqs))
        spare_mtp_rows_.push_back(std::move(r.mtp_hidden));
    decltype(r.mtp_hidden)().swap(r.mtp_hidden);  // moved from, or not kept: no buffer left behind
}

void Engine::propose_drafts() {
    const SpeculativeConfig& spec = cfg_.speculative;
    if (!spec.enabled()) return;
    // Requests in the decode state (their next step is one real token, plus drafts).
    std::vector<Request*>& reqs = draft_lists_.decoding;
    std::vector<int>& k_of = draft_lists_.k_of;
    reqs.clear();
    k_of.clear();
    for (auto& [id, rp] : requests_) {
        Request& r = *rp;
        SchedRequest& s = *r.sched;
        if (s.status != RequestStatus::RUNNING || r.finish != FinishReason::NONE) continue;
        if (s.num_computed + 1 != static_cast<int64_t>(s.tokens.size())) continue;
        if (r.constraint) continue;  // structured outputs decode one token per step (their mask needs each)
        reqs.push_back(&r);
    }
    const int k = reqs.empty()    ? 0
                  : spec.adaptive ? cost_.choose(static_cast<int>(reqs.size()))
                                  : spec.num_speculative_tokens;
    const bool probe = spec.adaptive && cost_.probing();
    k_planned_ = probe ? -1 : k;  // a probe step is not timed
    speculating_ = k > 0 && !probe;
    // The probing request: the same one while it runs (its MTP cache is kept current), else the running
    // request with the fewest pending MTP rows whose cache is not stale.
    if (spec.method == SpecMethod::MTP) {
        const Request* keeper = nullptr;
        for (Request* rp : reqs)
            if (rp->sched->id == mtp_keeper_ && !rp->mtp_stale) keeper = rp;
        if (!keeper)
            for (Request* rp : reqs)
                if (!rp->mtp_stale && (!keeper || rp->mtp_hidden.size() < keeper->mtp_hidden.size()))
                    keeper = rp;
        mtp_keeper_ = keeper ? keeper->sched->id : -1;
    }
    for (size_t i = 0; i < reqs.size(); ++i) {
        Request* rp = reqs[i];
        SchedRequest& s = *rp->sched;
        const bool prober =
            spec.method == SpecMethod::MTP ? s.id == mtp_keeper_ : i == probe_turn_ % reqs.size();
        if ((probe && !prober) || rp->mtp_stale) {
            k_of.push_back(0);
            continue;
        }
        // Never beyond max_tokens: the step emits at most 1 + k tokens. KV blocks for every position the
        // drafts touch are taken now if the pool has them (no preemption for a draft).
        int kr = std::max(0, std::min(k, rp->params.max_tokens - static_cast<int>(rp->output.size()) - 1));
        if (kr > 0 && !scheduler_->reserve_blocks(s, s.num_computed + 1 + kr))
            kr = std::max<int>(0, static_cast<int>(s.blocks.size()) * scheduler_->block_size() -
                                      static_cast<int>(s.num_computed) - 1);
        kr = std::min(kr, k);
        k_of.push_back(kr);
    }
    if (probe) ++probe_turn_;
    if (spec.method == SpecMethod::NGRAM) {
        for (size_t i = 0; i < reqs.size(); ++i) {
            SchedRequest& s = *reqs[i]->sched;
            s.drafts.clear();
            if (k_of[i] > 0)
                ngram_propose(s.tokens, spec.prompt_lookup_min, spec.prompt_lookup_max, k_of[i], &s.drafts);
        }
    } else {
        mtp_drafts(reqs, k_of);
    }
    for (size_t i = 0; i < reqs.size(); ++i) {
        SchedRequest& s = *reqs[i]->sched;
        if (draft_hook_) draft_hook_(s.id, s.tokens, k_of[i], &s.drafts);
        // Drafts kept from an earlier step (the request was not scheduled since) obey this step's k too.
        if (static_cast<int>(s.drafts.size()) > k_of[i]) s.drafts.resize(k_of[i]);
    }
}

// One sequence of the MTP plan: r's pending rows (slot t: h_t and token t+1).
void Engine::append_mtp_rows(Request& r) {
    BatchPlan& p = mtp_plan_;
    SchedRequest& s = *r.sched;
    const int64_t n = static_cast<int64_t>(r.mtp_hidden.size()) / model_->config().hidden;
    for (int64_t j = 0; j < n; ++j) {
        const int64_t slot = r.mtp_done + j;
        p.token_ids.push_back(s.tokens[slot + 1]);
        p.positions.push_back(slot);
        p.slot_mapping.push_back(kv_->slot_of(s.blocks.data(), slot));
    }
    mtp_in_.insert(mtp_in_.end(), r.mtp_hidden.begin(), r.mtp_hidden.end());
    p.cu_seqlens.push_back(p.n_tokens());
    p.state_slot.push_back(s.slot);
    p.has_initial_state.push_back(1);
    p.push_block_table(s.blocks);
}

// Prefix caching: a finishing request's pending MTP rows are written before its blocks go to the cache,
// so a later prompt that shares them drafts from a complete MTP cache. Only while speculating (rows
// that wait for a probe are not worth an extra pass when drafts do not pay).
void Engine::flush_mtp_rows(Request& r) {
    if (!cfg_.enable_prefix_caching || !cfg_.speculative.uses_mtp() || !speculating_ || r.mtp_stale ||
        r.mtp_hidden.empty())
        return;
    BatchPlan& p = mtp_plan_;
    p.clear();
    mtp_in_.clear();
    p.max_blocks = std::max<int64_t>(1, r.sched->blocks.size());
    p.cu_seqlens.push_back(0);
    append_mtp_rows(r);
    ForwardOptions fo;
    fo.bf16_activations = cfg_.bf16;
    Status st =
        model_->mtp_forward(*forward_ws_, p, mtp_in_.data(), *kv_, fo, nullptr);  // the layer's K/V only
    GDN_CHECK(st.is_ok(), "MTP forward failed on a plan the engine built: %s", st.message().c_str());
    r.mtp_done += static_cast<int64_t>(r.mtp_hidden.size()) / model_->config().hidden;
    r.mtp_hidden.clear();
}

void Engine::mtp_drafts(const std::vector<Request*>& reqs, const std::vector<int>& k_of) {
    const ModelConfig& mc = model_->config();
    const int64_t H = mc.hidden;
    ForwardOptions fo;
    fo.bf16_activations = cfg_.bf16;
    // 1. Catch-up: the MTP layer over every pending slot of the requests that draft now (slot t: h_t and
    // token t+1), and of any request with many pending rows; the drafting ones' last slot gives draft 1.
    std::vector<Request*>&rows_of = draft_lists_.rows_of, &drafting = draft_lists_.drafting;
    std::vector<int>& kd = draft_lists_.kd;
    rows_of.clear();
    drafting.clear();
    kd.clear();
    BatchPlan& p = mtp_plan_;
    p.clear();
    mtp_in_.clear();
    auto drafts_for = [&](const Request* r) {
        const auto it = std::find(reqs.begin(), reqs.end(), r);
        return it == reqs.end() ? 0 : k_of[it - reqs.begin()];
    };
    for (auto& [id, rp] : requests_) {
        Request& r = *rp;
        SchedRequest& s = *r.sched;
        if (s.status != RequestStatus::RUNNING || r.finish != FinishReason::NONE) continue;
        const int64_t n = static_cast<int64_t>(r.mtp_hidden.size()) / H;
        const int kr = drafts_for(&r);
        if (kr == 0) s.drafts.clear();
        if (n == 0) continue;  // unchanged since its drafts were made: they still hold
        // Catch up: to draft (a probe included: the probing request's rows wait for its next probe, and
        // are never run if it finishes first); or every kMtpCatchUpRows rows while speculating.
        if (kr == 0 && !(speculating_ && n >= kMtpCatchUpRows)) continue;
        rows_of.push_back(&r);
    }
    if (rows_of.empty()) return;
    int64_t max_blocks = 1;
    for (Request* r : rows_of) max_blocks = std::max<int64_t>(max_blocks, r->sched->blocks.size());
    p.max_blocks = max_blocks;
    p.cu_seqlens.push_back(0);
    for (Request* r : rows_of) {
        SchedRequest& s = *r->sched;
        const int64_t n = static_cast<int64_t>(r->mtp_hidden.size()) / H;
        append_mtp_rows(*r);
        const int kr = drafts_for(r);
        if (kr > 0 && r->mtp_done + n == s.num_computed) {
            p.logits_rows.push_back(p.n_tokens() - 1);
            drafting.push_back(r);
            kd.push_back(kr);
        }
    }
    mtp_ids_.clear();
    mtp_out_.clear();
    const double t_catch_up = now_seconds();
    Status st = model_->mtp_forward(*forward_ws_, p, mtp_in_.data(), *kv_, fo, nullptr, &mtp_ids_, &mtp_out_);
    if (!drafting.empty() && p.n_tokens() == static_cast<int64_t>(drafting.size()))
        cost_.observe_draft(now_seconds() - t_catch_up);  // one row per drafting request: a clean draft step
    GDN_CHECK(st.is_ok(), "MTP forward failed on a plan the engine built: %s", st.message().c_str());
    // Each drafting request's last hidden row (mtp_out_'s rows are the logits rows: one per drafting
    // request, in order): the next recursive step's input.
    std::vector<float>& last = draft_lists_.last;
    last.assign(mtp_out_.begin(), mtp_out_.end());
    {
        size_t di = 0;
        for (Request* r : rows_of) {
            r->mtp_done += static_cast<int64_t>(r->mtp_hidden.size()) / H;
            r->mtp_hidden.clear();
            if (di < drafting.size() && drafting[di] == r) r->sched->drafts.assign(1, mtp_ids_[di++]);
        }
    }
    // 2. Drafts 2..k: the layer again on its own output (vLLM's recursion with one MTP layer): slot t + 1
    // takes the last output and the draft just made, at the next position.
    const int k_max = kd.empty() ? 0 : *std::max_element(kd.begin(), kd.end());
    for (int step = 2; step <= k_max; ++step) {
        p.clear();
        mtp_in_.clear();
        p.max_blocks = max_blocks;
        p.cu_seqlens.push_back(0);
        std::vector<size_t>& idx = draft_lists_.idx;
        idx.clear();
        for (size_t i = 0; i < drafting.size(); ++i) {
            if (kd[i] < step) continue;
            SchedRequest& s = *drafting[i]->sched;
            const int64_t slot = s.num_computed + step - 2;
            p.token_ids.push_back(s.drafts.back());
            p.positions.push_back(slot);
            p.slot_mapping.push_back(kv_->slot_of(s.blocks.data(), slot));
            mtp_in_.insert(mtp_in_.end(), last.begin() + i * H, last.begin() + (i + 1) * H);
            p.cu_seqlens.push_back(p.n_tokens());
            p.state_slot.push_back(s.slot);
            p.has_initial_state.push_back(1);
            p.push_block_table(s.blocks);
            p.logits_rows.push_back(p.n_tokens() - 1);
            idx.push_back(i);
        }
        mtp_ids_.clear();
        mtp_out_.clear();
        const double t_step = now_seconds();
        st = model_->mtp_forward(*forward_ws_, p, mtp_in_.data(), *kv_, fo, nullptr, &mtp_ids_, &mtp_out_);
        cost_.observe_draft(now_seconds() - t_step);
        GDN_CHECK(st.is_ok(), "MTP forward failed on a plan the engine built: %s", st.message().c_str());
        for (size_t j = 0; j < idx.size(); ++j) {
            drafting[idx[j]]->sched->drafts.push_back(mtp_ids_[j]);
            std::memcpy(last.data() + idx[j] * H, mtp_out_.data() + j * H, H * sizeof(float));
        }
    }
}

}  // namespace gdn
