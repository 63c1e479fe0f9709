// Prefix caching: the block pool's identities, refcounts and LRU; the snapshot cache's eviction order;
// the scheduler's lookups with fake requests; and on the golden models of all three families (f32 and
// bf16), outputs with the cache on identical to outputs with it off across every kind of snapshot,
// partial hits, eviction under memory pressure, preemption, aborts and forced hash collisions, with the
// pools back to their initial state afterwards.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include <unistd.h>
#include "cache/block_pool.h"
#include "cache/snapshot_cache.h"

#include "engine/chat_prompt.h"
#include "engine/engine.h"
#include "engine/scheduler.h"
#include "test_util.h"

using namespace gdn;
using namespace gdn::test;

namespace {

std::vector<int32_t> toks(int n, int32_t base) {
    std::vector<int32_t> v(n);
    for (int i = 0; i < n; ++i) v[i] = base + i;
    return v;
}

TEST(BlockPool, IdentityCoversThePrefixAndCollisionsAreDetected) {
    for (bool collide : {false, true}) {
        BlockPool p(8, 4);
        if (collide) p.set_hash_for_testing([](uint64_t, const int32_t*, int32_t) { return uint64_t{42}; });
        const auto a = toks(4, 0), b = toks(4, 100);
        const int32_t x = p.allocate(), y = p.allocate();
        ASSERT_TRUE(p.commit(x, -1, a.data()));
        ASSERT_TRUE(p.commit(y, x, b.data()));
        EXPECT_EQ(p.find(-1, a.data()), x);
        EXPECT_EQ(p.find(x, b.data()), y);
        EXPECT_EQ(p.find(-1, b.data()), -1) << "same tokens, other prefix";
        EXPECT_EQ(p.find(y, b.data()), -1);
        auto c = b;
        c[3] = 7;
        EXPECT_EQ(p.find(x, c.data()), -1) << "one token differs (collide=" << collide << ")";
        // A second block with the same content stays private.
        const int32_t z = p.allocate();
        EXPECT_FALSE(p.commit(z, -1, a.data()));
        EXPECT_FALSE(p.registered(z));
        p.release(z);
        // Released blocks stay findable (LRU) and count as free.
        p.release(y);
        p.release(x);
        EXPECT_EQ(p.n_free(), 8);
        EXPECT_EQ(p.n_lru(), 2);
        EXPECT_EQ(p.find(x, b.data()), y);
        p.acquire(x);
        EXPECT_EQ(p.refcount(x), 1);
        EXPECT_EQ(p.n_lru(), 1);
        p.release(x);
        // Allocations take plain free blocks first, then evict the least recently released (y, the tail).
        std::vector<int32_t> got;
        for (int i = 0; i < 6; ++i) got.push_back(p.allocate());
        EXPECT_EQ(p.evictions(), 0);
        EXPECT_EQ(p.allocate(), y);
        EXPECT_EQ(p.evictions(), 1);
        EXPECT_EQ(p.find(x, b.data()), -1);
        // Evicting the parent makes its children unreachable even if their id is reused with new content.
        EXPECT_EQ(p.allocate(), x);
        EXPECT_EQ(p.find(-1, a.data()), -1);
        EXPECT_TRUE(p.commit(x, -1, c.data()));
        EXPECT_EQ(p.find(x, b.data()), -1);
        EXPECT_EQ(p.allocate(), -1);
        p.release(x);
        p.release(y);
        for (int32_t g : got) p.release(g);
        p.clear_cache();
        EXPECT_EQ(p.n_cached(), 0);
        EXPECT_EQ(p.n_free(), 8);
        EXPECT_EQ(p.n_lru(), 0);
    }
}

TEST(SnapshotCache, EvictsColdBeforeHotAndSkipsPinned) {
    SnapshotCache s(3, 10, /*hot_after_hits=*/1);
    s.add(1, 101);
    s.add(2, 102);
    s.add(3, 103);
    EXPECT_TRUE(s.full());
    s.mark_hit(1);
    s.pin(2);
    EXPECT_EQ(s.evict_one(), 103);  // 2 is pinned, 1 was hit
    EXPECT_EQ(s.slot_of(3), -1);
    EXPECT_EQ(s.evict_one(), 101);  // only the hit one is not pinned
    EXPECT_EQ(s.evict_one(), -1);
    s.unpin_all();
    EXPECT_EQ(s.evict_one(), 102);
    EXPECT_EQ(s.size(), 0);
    EXPECT_EQ(s.evictions(), 3);
    SnapshotCache two(2, 10);  // the default: hot from the second hit
    two.add(1, 101);
    two.add(2, 102);
    two.mark_hit(1);  // once: still cold, but now the most recent
    EXPECT_EQ(two.evict_one(), 102);
    two.add(3, 103);
    two.mark_hit(1);  // twice: hot
    two.mark_hit(3);
    EXPECT_EQ(two.evict_one(), 103);
}

// Fake requests: a prompt after another with the same first blocks starts after them, only where a
// snapshot exists, and never at its last token; blocks are shared and conserved.
TEST(Scheduler, PrefixHitsStartAtSnapshotsAndConserveBlocks) {
    SchedulerConfig cfg;
    cfg.max_num_seqs = 4;
    cfg.max_num_batched_tokens = 256;
    cfg.max_prefill_chunk = 256;
    const int32_t bs = 16;
    BlockPool pool(64, bs);
    SnapshotCache snaps(8, 64);
    Scheduler s(cfg, pool, nullptr, 4 + 8, bs);
    s.enable_prefix_cache(&snaps);
    auto run = [&](std::vector<int32_t> t, std::vector<int64_t> snapshot_at, int64_t gen) {
        auto r = std::make_shared<SchedRequest>();
        static int64_t id = 1;
        r->id = id++;
        r->tokens = std::move(t);
        r->num_prompt = static_cast<int64_t>(r->tokens.size());
        r->max_total_tokens = r->num_prompt + gen;
        r->snapshot_at = std::move(snapshot_at);
        s.add(r);
        int64_t first_chunk_start = -1;
        while (!s.empty()) {
            const SchedulerOutput& o = s.schedule();
            s.restores_done();
            for (const auto& c : o.chunks) {
                if (first_chunk_start < 0) first_chunk_start = c.req->num_computed;
                // Chunks end at snapshot positions.
                for (int64_t p : c.req->snapshot_at)
                    EXPECT_FALSE(p > c.req->num_computed && p < c.req->num_computed + c.num_new);
                const bool sampled =
                    c.req->num_computed + c.num_new == static_cast<int64_t>(c.req->tokens.size());
                s.on_computed(c);
                s.pending_copies().clear();
                if (sampled) {
                    c.req->tokens.push_back(7);
                    if (static_cast<int64_t>(c.req->tokens.size()) >= c.req->max_total_tokens)
                        s.finish(c.req->id);
                }
            }
        }
        return first_chunk_start;
    };
    auto p1 = toks(100, 1);
    EXPECT_EQ(run(p1, {48, 96}, 4), 0);
    EXPECT_EQ(pool.n_free(), 64);
    EXPECT_GT(snaps.size(), 0);
    auto p2 = toks(100, 1);
    p2.resize(90);  // shares 90 tokens: the snapshot at 48 is the last one inside
    p2.push_back(5000);
    EXPECT_EQ(run(p2, {}, 2), 48);
    EXPECT_EQ(run(toks(96, 1), {}, 2), 48) << "a snapshot at the prompt's last token cannot be used";
    // The first prompt again plus its 4 generated tokens (7s): the decode-time snapshot at 96 + 0 (the
    // first decode step) — 96 is a prompt snapshot already, so the hit is 96.
    auto p4 = toks(100, 1);
    for (int i = 0; i < 3; ++i) p4.push_back(7);
    p4.push_back(9);
    EXPECT_EQ(run(p4, {}, 2), 96);
    EXPECT_EQ(pool.n_free(), 64);
    const PrefixCacheStats st = s.prefix_stats();
    EXPECT_EQ(st.hit_tokens, 48 + 48 + 96);
    s.clear_prefix_cache();
    EXPECT_EQ(pool.n_cached(), 0);
    EXPECT_EQ(snaps.size(), 0);
    EXPECT_EQ(s.free_slots(), 12);
}

// The eviction policy, measured: a synthetic workload through the scheduler (fake slots, no model) of
// 48 conversations of 6 turns, a third of them behind one shared 512-token system prompt, turns taken in
// random order, with room for 24 snapshots. Prints the share of prompt tokens found in the cache for
// plain LRU (0), hot from the first hit (1) and from the second (2, the engine's); the engine's policy
// must do at least as well as the others.
TEST(SnapshotEviction, PolicyComparison) {
    std::map<int, double> share;
    for (int hot_after : {0, 1, 2}) {
        SchedulerConfig cfg;
        cfg.max_num_seqs = 4;
        cfg.max_num_batched_tokens = 512;
        const int32_t bs = 16, n_blocks = 40000;
        BlockPool pool(n_blocks, bs);
        SnapshotCache snaps(24, n_blocks, hot_after);
        Scheduler s(cfg, pool, nullptr, 4 + 24, bs);
        s.enable_prefix_cache(&snaps);
        std::mt19937 rng(5);
        const int n_conv = 48, n_turns = 6;
        std::vector<std::vector<int32_t>> hist(n_conv);
        std::vector<int> turn(n_conv, 0);
        int32_t next_tok = 100000;
        for (int c = 0; c < n_conv; ++c)
            if (c % 3 == 0) hist[c] = toks(512, 1);  // the shared system prompt
        int64_t id = 1;
        for (int remaining = n_conv * n_turns; remaining > 0;) {
            const int c = static_cast<int>(rng() % n_conv);
            if (turn[c] == n_turns) continue;
            auto& h = hist[c];
            const int64_t system_end = c % 3 == 0 ? 512 : 0;
            for (int i = 0; i < 200; ++i) h.push_back(next_tok++);  // the new user message
            auto r = std::make_shared<SchedRequest>();
            r->id = id++;
            r->tokens = h;
            r->num_prompt = static_cast<int64_t>(h.size());
            r->max_total_tokens = r->num_prompt + 32;
            for (int64_t p : {system_end, r->num_prompt - 3, r->num_prompt})
                if (p / bs * bs > 0) r->snapshot_at.push_back(p / bs * bs);
            std::sort(r->snapshot_at.begin(), r->snapshot_at.end());
            r->snapshot_at.erase(std::unique(r->snapshot_at.begin(), r->snapshot_at.end()),
                                 r->snapshot_at.end());
            s.add(r);
            while (!s.empty()) {
                const SchedulerOutput& o = s.schedule();
                s.restores_done();
                for (const auto& ch : o.chunks) {
                    const bool sampled =
                        ch.req->num_computed + ch.num_new == static_cast<int64_t>(ch.req->tokens.size());
                    s.on_computed(ch);
                    s.pending_copies().clear();
                    if (sampled) {
                        ch.req->tokens.push_back(next_tok++);
                        if (static_cast<int64_t>(ch.req->tokens.size()) >= ch.req->max_total_tokens)
                            s.finish(ch.req->id);
                    }
                }
            }
            // The answer joins the history (its last token was never computed, as in the engine).
            h.assign(r->tokens.begin(), r->tokens.end());
            ++turn[c];
            --remaining;
        }
        const PrefixCacheStats st = s.prefix_stats();
        share[hot_after] = double(st.hit_tokens) / st.query_tokens;
        std::printf(
            "snapshot eviction, hot after %d hit(s): %.1f%% of %lld prompt tokens from the cache, %lld "
            "snapshots "
            "evicted\n",
            hot_after, 100 * share[hot_after], (long long)st.query_tokens, (long long)st.snapshot_evictions);
    }
    EXPECT_GE(share[SnapshotCache::kDefaultHotAfterHits], share[0]);
    EXPECT_GE(share[SnapshotCache::kDefaultHotAfterHits], share[1]);
}

struct Loaded {
    std::shared_ptr<const Model> model;
    std::shared_ptr<const Tokenizer> tok;
};

Loaded load(const std::string& dir) {
    auto m = Model::load(ExecContext::process(), dir, nullptr, {});
    EXPECT_TRUE(m.is_ok()) << m.message();
    auto t = Tokenizer::load(dir);
    EXPECT_TRUE(t.is_ok()) << t.message();
    return {std::shared_ptr<const Model>(std::move(*m)), *t};
}

std::unique_ptr<Engine> make_engine(const Loaded& l, EngineConfig cfg) {
    if (cfg.cache_memory == EngineConfig{}.cache_memory) cfg.cache_memory = 64ull << 20;
    if (cfg.prefix_cache_memory == EngineConfig{}.prefix_cache_memory) cfg.prefix_cache_memory = 64ull << 20;
    auto e = Engine::create(l.model, l.tok, cfg);
    EXPECT_TRUE(e.is_ok()) << e.message();
    return std::move(*e);
}

struct Out {
    std::vector<int32_t> tokens;
    std::string text;
};

// Steps until every request finished; id -> output.
std::map<int64_t, Out> run_all(Engine& e, std::function<void(Engine&, int64_t)> each_step = nullptr) {
    std::map<int64_t, Out> out;
    for (int64_t step = 0; e.has_unfinished() && step < 100000; ++step) {
        if (each_step) each_step(e, step);
        for (const RequestOutput& o : e.step()) {
            auto& v = out[o.id];
            v.tokens.insert(v.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
            v.text += o.text_delta;
        }
    }
    EXPECT_FALSE(e.has_unfinished());
    return out;
}

// Every pool back to its initial state once the cache is dropped.
void expect_pools_initial(Engine& e, const std::string& what) {
    EngineStats st = e.stats();
    EXPECT_EQ(st.kv_blocks_free, st.kv_blocks_total) << what;
    EXPECT_EQ(st.state_slots_free, st.state_slots_total) << what;
    e.clear_prefix_cache();
    st = e.stats();
    EXPECT_EQ(st.prefix.snapshots, 0) << what;
    EXPECT_EQ(st.prefix.cached_blocks, 0) << what;
    EXPECT_EQ(st.kv_blocks_free, st.kv_blocks_total) << what;
    EXPECT_EQ(st.state_slots_free, st.state_slots_total) << what;
}

std::vector<int32_t> random_ids(int n, std::mt19937& rng) {
    std::vector<int32_t> v(n);
    for (auto& t : v) t = 1 + static_cast<int32_t>(rng() % 900);
    return v;
}

// One scenario, run on an engine: a list of "waves" of requests; each wave is added at once and run to
// completion before the next (so later waves can hit what earlier ones left). Returns every output.
using Wave = std::vector<Prompt>;
std::vector<Out> run_waves(
    Engine& e, const std::vector<std::function<Wave(const std::vector<Out>&)>>& waves, int max_tokens,
    std::function<void(Engine&, int64_t, const std::vector<int64_t>&)> each_step = nullptr) {
    std::vector<Out> all;
    for (const auto& make : waves) {
        std::vector<int64_t> ids;
        for (const Prompt& p : make(all)) {
            auto id = e.add_request(p, greedy(max_tokens));
            EXPECT_TRUE(id.is_ok()) << id.message();
            ids.push_back(*id);
        }
        auto got = run_all(e, each_step ? [&](Engine& en, int64_t s) { each_step(en, s, ids); }
                                        : std::function<void(Engine&, int64_t)>());
        for (int64_t id : ids) all.push_back(got[id]);
    }
    return all;
}

Json chat(std::initializer_list<std::pair<const char*, std::string>> m) {
    Json a = Json::array();
    for (const auto& [role, content] : m) a.push_back({{"role", role}, {"content", content}});
    return a;
}

class PrefixGolden : public ::testing::TestWithParam<std::tuple<const char*, bool>> {};

TEST_P(PrefixGolden, OutputsMatchTheCacheOff) {
    OneThread one_thread;
    Loaded l = load(golden_dir(std::get<0>(GetParam())));
    EngineConfig base;
    base.bf16 = std::get<1>(GetParam());
    base.prefix_snapshot_interval = 64;
    std::mt19937 rng(11);
    const auto doc = random_ids(300, rng), q1 = random_ids(40, rng), q2 = random_ids(37, rng);
    auto cat = [](std::vector<int32_t> a, const std::vector<int32_t>& b) {
        a.insert(a.end(), b.begin(), b.end());
        return a;
    };
    const std::string sys = "You are a helpful assistant. Answer briefly and cite the document when you can.";
    // Waves: (1) a document and a question; (2) the same document, another question (interval and
    // prompt-end snapshots), the first prompt again, and the first prompt plus its answer plus more
    // (generation-end snapshot); (3) a chat; (4) its next turn and a second conversation with the same
    // system prompt (message-end and system-end snapshots), four at once.
    std::vector<std::function<Wave(const std::vector<Out>&)>> waves = {
        [&](const std::vector<Out>&) { return Wave{Prompt::from_ids(cat(doc, q1))}; },
        [&](const std::vector<Out>& o) {
            return Wave{Prompt::from_ids(cat(doc, q2)), Prompt::from_ids(cat(doc, q1)),
                        Prompt::from_ids(cat(cat(cat(doc, q1), o[0].tokens), q2))};
        },
        [&](const std::vector<Out>&) {
            return Wave{Prompt::from_messages(chat({{"system", sys}, {"user", "What is in the document?"}}))};
        },
        [&](const std::vector<Out>& o) {
            return Wave{Prompt::from_messages(chat({{"system", sys},
                                                    {"user", "What is in the document?"},
                                                    {"assistant", o[4].text},
                                                    {"user", "And then?"}})),
                        Prompt::from_messages(chat({{"system", sys}, {"user", "Something else entirely."}})),
                        Prompt::from_messages(chat({{"system", sys}, {"user", "What is in the document?"}})),
                        Prompt::from_ids(cat(doc, q2))};
        },
    };
    EngineConfig off = base;
    off.enable_prefix_caching = false;
    auto e_off = make_engine(l, off);
    const auto want = run_waves(*e_off, waves, 20);
    EXPECT_EQ(e_off->stats().prefix.hit_tokens, 0);

    struct Variant {
        const char* what;
        EngineConfig cfg;
        bool collide = false;
        bool preempt_and_abort = false;
    };
    std::vector<Variant> variants;
    variants.push_back({"cache on", base});
    variants.push_back({"forced hash collisions", base, true});
    {
        EngineConfig small = base;  // room for 3 snapshots and few blocks: evictions all the time
        const ModelConfig& c = l.model->config();
        const size_t slot =
            StateSlots::bytes_per_slot(c.n_gdn_layers(), c.gdn_conv_state_floats(), c.gdn_ssm_state_floats());
        const size_t block =
            KvCache::bytes_per_block(c.n_attention_layers(), c.attn_kv_heads * c.head_dim, 16, DType::F32);
        small.prefix_cache_memory = 3 * slot;
        small.max_model_len = 512;
        small.max_num_seqs = 4;
        small.max_num_batched_tokens = 128;
        small.max_prefill_chunk = 64;
        small.cache_memory = 4 * slot + 80 * block;
        variants.push_back({"memory pressure", small});
    }
    variants.push_back({"preemption and aborts", base, false, true});
    for (const Variant& v : variants) {
        auto e = make_engine(l, v.cfg);
        if (v.collide)
            e->set_prefix_hash_for_testing([](uint64_t, const int32_t*, int32_t) { return uint64_t{7}; });
        std::set<int64_t> aborted;
        int64_t preempted = 0;
        auto got = run_waves(*e, waves, 20, [&](Engine& en, int64_t step, const std::vector<int64_t>& ids) {
            if (!v.preempt_and_abort || ids.size() < 3) return;
            if (step == 3 || step == 9) preempted += en.force_preempt(ids[1]);
            if (step == 5 && aborted.empty()) {
                aborted.insert(ids[2]);
                en.abort(ids[2]);
            }
        });
        ASSERT_EQ(got.size(), want.size()) << v.what;
        for (size_t i = 0; i < want.size(); ++i) {
            if (v.preempt_and_abort && (i == 3 || i == 7))
                continue;  // the aborted ones (third of waves 2 and 4)
            EXPECT_EQ(got[i].tokens, want[i].tokens) << v.what << ", request " << i;
        }
        const EngineStats st = e->stats();
        EXPECT_GT(st.prefix.hit_tokens, 0) << v.what;
        if (v.preempt_and_abort) {
            EXPECT_GT(preempted, 0);
        }
        if (std::string(v.what) == "cache on") {
            // 2nd wave: doc+q2 and doc+q1 from the interval / prompt-end snapshots, the answer's extension
            // from the decode-time snapshot; 4th: the chat's next turn and the system prompt.
            EXPECT_GE(st.prefix.hit_tokens, 256 + 320 + 336);
            EXPECT_GT(st.prefix.snapshots_taken, 5);
        }
        if (std::string(v.what) == "memory pressure") {
            EXPECT_GT(st.prefix.snapshot_evictions + st.prefix.block_evictions, 0);
            EXPECT_LE(st.prefix.snapshots, 3);
        }
        expect_pools_initial(*e, v.what);
    }
}

INSTANTIATE_TEST_SUITE_P(Families, PrefixGolden,
                         ::testing::Combine(::testing::Values("qwen3_5", "qwen3_5_moe", "qwen3_next"),
                                            ::testing::Values(false, true)),
                         [](const auto& info) {
                             return std::string(std::get<0>(info.param)) +
                                    (std::get<1>(info.param) ? "_bf16" : "_f32");
                         });

}  // namespace
namespace {

// What makes reusing states computed by decode steps exact: a prefill of a prompt plus k generated tokens
// gives the bits the decode steps gave (the GDN prefill kernel applies the decode step's arithmetic token
// by token; the matmuls and, within one 256-key unit, attention do not depend on the row count).
TEST(PrefixGolden, PrefillOfDecodedTokensIsBitwiseEqualToTheirDecode) {
    OneThread one_thread;
    for (const char* fam : {"qwen3_5", "qwen3_5_moe", "qwen3_next"}) {
        Loaded l = load(golden_dir(fam));
        std::mt19937 rng(3);
        const auto ids = random_ids(48, rng);
        for (bool bf16 : {false, true}) {
            EngineConfig cfg;
            cfg.enable_prefix_caching = false;
            cfg.bf16 = bf16;
            auto e = make_engine(l, cfg);
            auto p = greedy(12);
            p.logprobs = 0;
            const int64_t id = *e->add_request(Prompt::from_ids(ids), p);
            std::vector<int32_t> gen;
            std::vector<float> lps;
            while (e->has_unfinished())
                for (const RequestOutput& r : e->step())
                    for (size_t i = 0; i < r.new_tokens.size(); ++i) {
                        gen.push_back(r.new_tokens[i]);
                        lps.push_back(r.logprobs[i][0].logprob);
                    }
            ASSERT_EQ(gen.size(), 12u);
            for (int k = 1; k < 12; ++k) {
                auto pr = ids;
                pr.insert(pr.end(), gen.begin(), gen.begin() + k);
                auto q = greedy(1);
                q.logprobs = 0;
                const int64_t id2 = *e->add_request(Prompt::from_ids(pr), q);
                float lp = 0;
                int32_t t = -1;
                while (e->has_unfinished())
                    for (const RequestOutput& r : e->step())
                        if (r.id == id2 && !r.new_tokens.empty()) {
                            lp = r.logprobs[0][0].logprob;
                            t = r.new_tokens[0];
                        }
                EXPECT_EQ(t, gen[k]) << fam << " bf16=" << bf16 << " k=" << k;
                EXPECT_EQ(lp, lps[k]) << fam << " bf16=" << bf16 << " k=" << k;
            }
            (void)id;
        }
    }
}

}  // namespace

namespace {

// A Qwen3.5-style template (bench/qwen3_5_style_chat_template.jinja) re-renders earlier answers without
// their reasoning and ends the generation prompt with "<think>\n": the next prompt diverges right after
// the last user message, and the message-end snapshot still gives everything up to there. On the
// trained demo model, cache on and off agree.
TEST(PrefixCache, Qwen35StyleTemplateReusesEverythingUpToTheLastUserMessage) {
    OneThread one_thread;
    TempDir dir;
    const std::string demo = demo_model_dir();
    for (const char* f : {"config.json", "generation_config.json", "tokenizer.json"})
        write_bytes(dir.path() + "/" + f, read_bytes(demo + "/" + f));
    ASSERT_EQ(symlink((demo + "/model.safetensors").c_str(), (dir.path() + "/model.safetensors").c_str()), 0);
    auto tc = parse_json(read_bytes(demo + "/tokenizer_config.json"), "tokenizer_config");
    ASSERT_TRUE(tc.is_ok());
    (*tc)["chat_template"] = read_bytes(source_dir() + "/bench/qwen3_5_style_chat_template.jinja");
    write_bytes(dir.path() + "/tokenizer_config.json", tc->dump());
    Loaded l = load(dir.path());
    EngineConfig on, off;
    off.enable_prefix_caching = false;
    auto e_on = make_engine(l, on), e_off = make_engine(l, off);
    Json msgs = chat({{"system", "You are a fortune cookie."}});
    const char* asks[] = {"Tell me a fortune about the sea.", "Define river.", "Tell me a joke.",
                          "Thanks, bye!"};
    int64_t prev_user_end = 0;
    for (int turn = 0; turn < 4; ++turn) {
        msgs.push_back({{"role", "user"}, {"content", asks[turn]}});
        auto rc = render_chat(*e_on->chat_template(), *l.tok, Prompt::from_messages(msgs), true);
        ASSERT_TRUE(rc.is_ok());
        ASSERT_FALSE(rc->message_ends.empty());
        SamplingParams sp = greedy(40);
        sp.ignore_eos = false;
        const int64_t hits_before = e_on->stats().prefix.hit_tokens;
        const int64_t a = *e_on->add_request(Prompt::from_messages(msgs), sp);
        const int64_t b = *e_off->add_request(Prompt::from_messages(msgs), sp);
        auto got = run_all(*e_on)[a];
        auto want = run_all(*e_off)[b];
        EXPECT_EQ(got.tokens, want.tokens) << "turn " << turn;
        const int64_t hit = e_on->stats().prefix.hit_tokens - hits_before;
        EXPECT_GE(hit, prev_user_end / 16 * 16)
            << "turn " << turn << ": the history up to the last user message";
        prev_user_end = rc->message_ends.back();
        msgs.push_back({{"role", "assistant"}, {"content", "<think>\nhmm\n</think>\n\n" + got.text}});
    }
    EXPECT_GT(e_on->stats().prefix.hit_tokens, 0);
    expect_pools_initial(*e_on, "qwen3.5-style conversation");
}

}  // namespace

namespace {

// With MTP speculation, the MTP layer's KV rows are part of what a cached block holds: the next turns of
// four conversations on the trained demo model give the tokens the cache-off engine gives, and their
// drafts are accepted about as often (a hit whose MTP rows were missing would draft from garbage).
TEST(PrefixCache, MtpSpeculationSharesTheMtpCacheAndStaysExact) {
    OneThread one_thread;
    LoadOptions lo;
    lo.mtp = true;
    auto m = Model::load(ExecContext::process(), demo_model_dir(), nullptr, lo);
    ASSERT_TRUE(m.is_ok()) << m.message();
    auto t = Tokenizer::load(demo_model_dir());
    ASSERT_TRUE(t.is_ok());
    Loaded l{std::shared_ptr<const Model>(std::move(*m)), *t};
    // Not adaptive: drafts every step, so acceptance does not depend on measured step times.
    auto spec = SpeculativeConfig::parse(R"({"method":"mtp","num_speculative_tokens":2,"adaptive":false})");
    ASSERT_TRUE(spec.is_ok());
    struct Run {
        std::vector<std::vector<int32_t>> outs;
        EngineStats st;
    };
    const auto& asks = demo_chat_messages();
    auto run = [&](bool cache) {
        EngineConfig cfg;
        cfg.speculative = *spec;
        cfg.enable_prefix_caching = cache;
        auto e = make_engine(l, cfg);
        std::vector<Json> convs(4, Json::array());
        Run r;
        for (int turn = 0; turn < 3; ++turn) {
            std::vector<int64_t> ids;
            for (int c = 0; c < 4; ++c) {
                convs[c].push_back({{"role", "user"}, {"content", asks[(c * 3 + turn) % asks.size()]}});
                SamplingParams sp = greedy(48);
                sp.ignore_eos = false;
                ids.push_back(*e->add_request(Prompt::from_messages(convs[c]), sp));
            }
            auto got = run_all(*e);
            for (int c = 0; c < 4; ++c) {
                r.outs.push_back(got[ids[c]].tokens);
                convs[c].push_back({{"role", "assistant"}, {"content", got[ids[c]].text}});
            }
        }
        r.st = e->stats();
        if (cache) expect_pools_initial(*e, "MTP + prefix caching");
        return r;
    };
    const Run off = run(false), on = run(true);
    EXPECT_EQ(on.outs, off.outs);
    EXPECT_GT(on.st.prefix.hit_tokens, 0);
    ASSERT_GT(off.st.spec.drafted, 0);
    ASSERT_GT(on.st.spec.drafted, 0);
    const double acc_off = double(off.st.spec.accepted) / off.st.spec.drafted;
    const double acc_on = double(on.st.spec.accepted) / on.st.spec.drafted;
    std::printf("MTP acceptance: cache off %.3f, on %.3f; %lld prompt tokens from the cache\n", acc_off,
                acc_on, (long long)on.st.prefix.hit_tokens);
    EXPECT_GT(acc_on, 0.85 * acc_off);
}

}  // namespace
