// Scheduler invariants with fake requests and no model: the token budget is never exceeded, blocks and
// slots are conserved, nobody starves, preemption and abort at any point leave no leak.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "engine/prefill_pacer.h"
#include "engine/scheduler.h"

using namespace gdn;

namespace {

struct Sim {
    SchedulerConfig cfg;
    BlockPool pool;
    Scheduler s;
    int32_t n_slots, block_size;
    Sim(SchedulerConfig c, int32_t n_blocks, int32_t slots, int32_t bs)
        : cfg(c), pool(n_blocks), s(c, pool, nullptr, slots, bs), n_slots(slots), block_size(bs) {}
};

// A waiting prompt of len tokens that may generate 8.
std::shared_ptr<SchedRequest> prompt(int64_t id, int64_t len) {
    auto r = std::make_shared<SchedRequest>();
    r->id = id;
    r->tokens.assign(len, 1);
    r->num_prompt = len;
    r->max_total_tokens = len + 8;
    return r;
}

TEST(Scheduler, RandomWorkloadKeepsInvariants) {
    std::mt19937 rng(123);
    SchedulerConfig cfg;
    cfg.max_num_seqs = 8;
    cfg.max_num_batched_tokens = 256;
    cfg.max_prefill_chunk = 128;
    Sim sim(cfg, /*blocks*/ 120, /*slots*/ 8, /*block size*/ 16);
    std::map<int64_t, std::shared_ptr<SchedRequest>> live;
    std::map<int64_t, int64_t> target;          // id -> total tokens to reach (prompt + generated)
    std::map<int64_t, int64_t> first_admitted;  // id -> step
    int64_t next_id = 1, finished = 0;
    const int64_t n_requests = 3000;
    int64_t steps = 0;
    while (finished < n_requests) {
        // Arrivals.
        for (int a = static_cast<int>(rng() % 4); a > 0 && next_id <= n_requests; --a) {
            auto r = std::make_shared<SchedRequest>();
            r->id = next_id++;
            const int64_t plen = 1 + rng() % 300;
            r->tokens.assign(plen, 1);
            r->num_prompt = plen;
            const int64_t gen = 1 + rng() % 40;
            r->max_total_tokens = plen + gen;
            target[r->id] = plen + gen;
            live[r->id] = r;
            sim.s.add(r);
        }
        sim.s.set_prefill_room(rng() % 3 == 0 ? 0 : static_cast<int>(1 + rng() % 200));  // the engine's pacer
        const SchedulerOutput& out = sim.s.schedule();
        ++steps;
        for (const auto& c : out.chunks)
            if (!first_admitted.count(c.req->id)) first_admitted[c.req->id] = steps;
        ASSERT_LE(out.n_tokens, cfg.max_num_batched_tokens);
        int64_t sum = 0;
        for (const auto& c : out.chunks) {
            sum += c.num_new;
            ASSERT_GT(c.num_new, 0);
            ASSERT_GE(c.req->slot, 0);
            // KV blocks cover every position that will be written.
            ASSERT_GE(static_cast<int64_t>(c.req->blocks.size()) * sim.block_size,
                      c.req->num_computed + c.num_new);
            // GDN chunk rule: a chunk ends on a multiple of 64 unless it reaches the end of the tokens.
            const int64_t end = c.req->num_computed + c.num_new;
            if (end < static_cast<int64_t>(c.req->tokens.size())) {
                ASSERT_EQ(end % cfg.gdn_chunk, 0);
            }
        }
        ASSERT_EQ(sum, out.n_tokens);
        ASSERT_LE(sim.s.n_running(), cfg.max_num_seqs);
        // Run the step: computed tokens advance; a request that reached its end samples one token.
        std::vector<int64_t> done;
        for (const auto& c : out.chunks) {
            sim.s.on_computed(c);
            SchedRequest& r = *c.req;
            if (r.num_computed == static_cast<int64_t>(r.tokens.size())) {
                if (static_cast<int64_t>(r.tokens.size()) >= target[r.id])
                    done.push_back(r.id);
                else
                    r.tokens.push_back(2);
            }
        }
        // Random aborts and forced preemptions at any point.
        if (rng() % 50 == 0 && !live.empty()) {
            auto it = std::next(live.begin(), rng() % live.size());
            done.push_back(it->first);
        }
        if (rng() % 30 == 0 && !out.chunks.empty())
            sim.s.preempt(out.chunks[rng() % out.chunks.size()].req->id);
        for (int64_t id : done) {
            if (!live.count(id)) continue;
            sim.s.finish(id);
            live.erase(id);
            ++finished;
        }

        ASSERT_LT(steps, 200000) << "no progress";
        // Conservation: blocks in use == blocks held by live requests.
        int64_t held = 0, slots_held = 0;
        for (auto& [id, r] : live) {
            held += static_cast<int64_t>(r->blocks.size());
            slots_held += r->slot >= 0;
        }
        ASSERT_EQ(held, sim.pool.n_blocks() - sim.pool.n_free());
        ASSERT_EQ(slots_held, sim.n_slots - sim.s.free_slots());
    }
    EXPECT_TRUE(sim.s.empty());
    EXPECT_EQ(sim.pool.n_free(), sim.pool.n_blocks());  // all free again at the end
    EXPECT_EQ(sim.s.free_slots(), sim.n_slots);
    EXPECT_GT(sim.s.total_preemptions(), 0);
    // No starvation: every request finished (the loop ended), and admission was first come, first served.
    int64_t prev = 0;
    for (auto& [id, step] : first_admitted) {
        EXPECT_GE(step, prev) << "request " << id << " admitted before an older one";
        prev = step;
    }
}

TEST(Scheduler, PreemptsNewestWhenBlocksRunOut) {
    SchedulerConfig cfg;
    cfg.max_num_seqs = 4;
    cfg.max_num_batched_tokens = 256;
    Sim sim(cfg, /*blocks*/ 6, /*slots*/ 4, /*block size*/ 16);
    auto a = std::make_shared<SchedRequest>(), b = std::make_shared<SchedRequest>();
    a->id = 1;
    a->tokens.assign(48, 1);  // 3 blocks
    a->num_prompt = 48;
    b->id = 2;
    b->tokens.assign(48, 1);
    b->num_prompt = 48;
    sim.s.add(a);
    sim.s.add(b);
    auto& o1 = sim.s.schedule();
    ASSERT_EQ(o1.chunks.size(), 2u);
    for (auto& c : o1.chunks) sim.s.on_computed(c);
    a->tokens.push_back(2);  // both decode: each needs a 4th block, only 0 free
    b->tokens.push_back(2);
    auto& o2 = sim.s.schedule();
    ASSERT_EQ(o2.preempted.size(), 1u);
    EXPECT_EQ(o2.preempted[0], 2);  // the newest
    EXPECT_EQ(b->num_computed, 0);
    ASSERT_EQ(o2.chunks.size(), 1u);
    EXPECT_EQ(o2.chunks[0].req->id, 1);
}

// A burst of prompts starts a prompt or two per step (admit_prompt_tokens), not all in one long step; the
// first waiting prompt always starts with the whole budget, short prompts still start together, a long
// prefill in progress leaves room for a newcomer, and 0 lifts the limit.
TEST(Scheduler, AdmissionCapStartsABurstAFewPromptsPerStep) {
    auto new_prompts = [](const SchedulerOutput& o) {
        int n = 0;
        for (const auto& c : o.chunks) n += c.req->num_computed == 0;
        return n;
    };
    SchedulerConfig cfg;
    cfg.max_num_seqs = 16;
    cfg.max_num_batched_tokens = 512;
    cfg.admit_prompt_tokens = 128;
    {
        Sim sim(cfg, 200, 16, 16);
        std::vector<std::shared_ptr<SchedRequest>> rs;
        for (int i = 0; i < 8; ++i) sim.s.add(rs.emplace_back(prompt(i + 1, 128)));
        for (int step = 1; step <= 8; ++step) {
            const SchedulerOutput& o = sim.s.schedule();
            EXPECT_EQ(new_prompts(o), 1) << "step " << step;     // one 128-token prompt per step ...
            EXPECT_EQ(static_cast<int>(o.chunks.size()), step);  // ... beside the decodes of the earlier ones
            for (const auto& c : o.chunks) sim.s.on_computed(c);
            for (auto& r : rs)
                if (r->num_computed == static_cast<int64_t>(r->tokens.size()) &&
                    r->status == RequestStatus::RUNNING)
                    r->tokens.push_back(2);
        }
    }
    {
        Sim sim(cfg, 200, 16, 16);
        auto longp = prompt(1, 1000);
        sim.s.add(longp);
        const SchedulerOutput& o = sim.s.schedule();
        ASSERT_EQ(o.chunks.size(), 1u);
        EXPECT_EQ(o.chunks[0].num_new, 512);  // the first prompt is not held to the cap
    }
    {
        Sim sim(cfg, 200, 16, 16);
        for (int i = 0; i < 8; ++i) sim.s.add(prompt(i + 1, 16));
        EXPECT_EQ(new_prompts(sim.s.schedule()), 8);  // 8 x 16 tokens fit the cap
    }
    {
        // A long prefill in progress leaves the cap's tokens to a prompt that arrives meanwhile, and takes
        // the whole budget again once nobody waits.
        Sim sim(cfg, 400, 16, 16);
        auto longp = prompt(1, 4000);
        sim.s.add(longp);
        for (const auto& c : sim.s.schedule().chunks) sim.s.on_computed(c);
        auto shortp = prompt(2, 100);
        sim.s.add(shortp);
        const SchedulerOutput& o = sim.s.schedule();
        ASSERT_EQ(o.chunks.size(), 2u);
        EXPECT_EQ(o.chunks[0].req->id, 1);
        EXPECT_EQ(o.chunks[0].num_new, 384);  // 512 - 128, a multiple of the GDN chunk
        EXPECT_EQ(o.chunks[1].req->id, 2);
        EXPECT_EQ(o.chunks[1].num_new, 100);
        for (const auto& c : o.chunks) sim.s.on_computed(c);
        shortp->tokens.push_back(2);
        const SchedulerOutput& o2 = sim.s.schedule();
        ASSERT_EQ(o2.chunks.size(), 2u);
        EXPECT_EQ(o2.chunks[0].num_new, 448);  // 512 - the decode, aligned down to the GDN chunk
    }
    cfg.admit_prompt_tokens = 0;
    {
        Sim sim(cfg, 200, 16, 16);
        for (int i = 0; i < 8; ++i) sim.s.add(prompt(i + 1, 128));
        EXPECT_EQ(new_prompts(sim.s.schedule()), 4);  // no cap: as many as the 512-token budget holds
    }
    {
        Sim sim(cfg, 400, 16, 16);
        sim.s.add(prompt(1, 4000));
        for (const auto& c : sim.s.schedule().chunks) sim.s.on_computed(c);
        sim.s.add(prompt(2, 100));
        const SchedulerOutput& o = sim.s.schedule();
        ASSERT_EQ(o.chunks.size(), 1u);  // no cap: the long prefill takes the whole budget, as before
        EXPECT_EQ(o.chunks[0].num_new, 512);
    }
}

// While requests decode, a long prefill in progress takes at most the prefill room (at least one GDN
// chunk) and a newcomer still starts whole within admit_prompt_tokens; without decodes, or with no room
// set, the prefill takes the budget.
TEST(Scheduler, PrefillRoomBoundsAStepWhileRequestsDecode) {
    auto prefill_tokens = [](const SchedulerOutput& o) {
        int64_t n = 0;
        for (const auto& c : o.chunks) n += c.num_new > 1 ? c.num_new : 0;
        return n;
    };
    SchedulerConfig cfg;
    cfg.max_num_batched_tokens = 512;
    cfg.admit_prompt_tokens = 128;
    for (int room : {0, 20, 100, 200}) {
        Sim sim(cfg, 600, 16, 16);
        sim.s.set_prefill_room(room);
        auto first = prompt(1, 32), longp = prompt(2, 4000);
        sim.s.add(first);
        for (const auto& c : sim.s.schedule().chunks) sim.s.on_computed(c);
        first->tokens.push_back(2);  // now decoding
        sim.s.add(longp);
        const int64_t want = room == 0 ? 448 : std::max(64, room) / 64 * 64;  // whole GDN chunks
        for (int step = 0; step < 3; ++step) {
            const SchedulerOutput& o = sim.s.schedule();
            ASSERT_EQ(o.chunks.size(), 2u);
            EXPECT_EQ(o.chunks[0].num_new, 1);  // the decode
            // The newcomer's first chunk: admit_prompt_tokens at least; then the room.
            EXPECT_EQ(prefill_tokens(o), step == 0 ? std::max<int64_t>(want, 128) : want) << "room " << room;
            for (const auto& c : o.chunks) sim.s.on_computed(c);
            first->tokens.push_back(2);
        }
        sim.s.finish(1);  // nobody decodes: the prefill takes the budget again
        const SchedulerOutput& o = sim.s.schedule();
        ASSERT_EQ(o.chunks.size(), 1u);
        EXPECT_EQ(o.chunks[0].num_new, 512);
    }
}

// The pacer: no room before a measurement or when off; then the target over the measured time per
// token, following the rate as it changes; steps too small to measure the rate are ignored.
TEST(PrefillPacer, RoomFollowsTheMeasuredRate) {
    PrefillPacer off(0);
    off.observe(512, 1.0, 64);
    EXPECT_EQ(off.room(), 0);
    PrefillPacer p(0.2);
    EXPECT_EQ(p.room(), 0);
    p.observe(32, 1.0, 64);  // too few tokens to count
    EXPECT_EQ(p.room(), 0);
    p.observe(500, 1.0, 64);  // 2 ms per token
    EXPECT_EQ(p.room(), 100);
    for (int i = 0; i < 50; ++i) p.observe(100, 0.1, 64);  // now 1 ms per token
    EXPECT_NEAR(static_cast<double>(p.room()), 200.0, 2.0);
}

}  // namespace
