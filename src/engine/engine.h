// Engine: step() = scheduler -> host-built batch plan -> model forward -> sampler -> outputs.
// Many requests share each forward step: continuous batching with chunked prefill over a paged KV
// cache and dense GDN state slots. One thread owns the engine; abort() may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "cache/state_slots.h"
#include "core/exec_context.h"
#include "core/huge_page_allocator.h"
#include "core/status.h"
#include "engine/prefill_pacer.h"
#include "engine/sampling.h"
#include "engine/scheduler.h"
#include "engine/speculative.h"
#include "model/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace gdn {

struct EngineConfig {
    // Where the engine's forwards, sampling and cache set-up run (its thread pool and profiler); unset:
    // the model's context. Engines over one Model on contexts of their own run independently.
    std::optional<ExecContext> context;
    int max_num_seqs = 16;
    int max_num_batched_tokens = 512;
    int max_model_len = 4096;
    int block_size = 16;
    int max_prefill_chunk = 512;
    int admit_prompt_tokens = 128;  // SchedulerConfig::admit_prompt_tokens (--admit-prompt-tokens)
    // While requests decode, a step's prefill tokens are held to what this many milliseconds of prefill
    // compute at the measured rate (engine/prefill_pacer.h; at least one 64-token chunk), so a long
    // prompt's chunks do not stretch the running requests' time per token. 0: only the token budget
    // limits them (the default here: steps then do not depend on timing); `gdn serve --prefill-step-ms`.
    int prefill_step_ms = 0;
    size_t cache_memory = 1ull << 30;  // KV blocks + state slots
    bool bf16 = true;                  // bf16 matmul inputs (see ForwardOptions)
    // K/V cache elements (--kv-cache-dtype); unset: default_kv_dtype(bf16), BF16 with bf16 activations.
    // BF16 halves the cache (twice the tokens in the same memory, half the bytes read by decode attention)
    // at the cost of rounding K and V, as HF's bf16 forward does; it needs bf16 activations. F32 keeps
    // them as computed.
    std::optional<DType> kv_dtype;
    DType kv_cache_dtype() const { return kv_dtype.value_or(default_kv_dtype(bf16)); }
    // Speculative decoding (--speculative-config): drafts from the MTP layer (the model must be loaded
    // with LoadOptions::mtp) or from prompt lookup, verified k + 1 tokens per step. Each running request
    // may hold up to 1 + k GDN state slots during a step (the memory plan counts them).
    SpeculativeConfig speculative;
    // Prefix caching (--enable-prefix-caching, on by default): full KV blocks are shared by content and
    // GDN state snapshots are kept at block-aligned positions (message ends, prompt ends, generation ends
    // and every prefix_snapshot_interval tokens of a prompt), in a pool of prefix_cache_memory bytes
    // beside cache_memory. A request starts after its longest cached prefix that ends in a snapshot.
    bool enable_prefix_caching = true;
    size_t prefix_cache_memory = 1ull << 30;
    int prefix_snapshot_interval = 1024;  // tokens; 0: none
    // Touch every page of the KV cache and the state slots (snapshots included) at creation, so the OS
    // faults and zeroes them before serving, not inside the first requests' steps (docs/perf.md, behind
    // the constants: engine/engine.h). The server sets it; tests and tools that use a fraction of the
    // memory leave it off.
    bool prefault_memory = false;
};

// What the user asks for: text, token ids, or chat messages (rendered with the checkpoint's template).
struct Prompt {
    std::string text;
    std::vector<int32_t> ids;
    Json messages;  // non-null: a chat request
    std::optional<bool> enable_thinking;
    Json chat_template_kwargs = Json::object();
    Json tools;  // null or the request's tool definitions (rendered by the template)
    // Token ids given with the token counts after complete chat messages (render_chat's message_ends,
    // when the caller rendered the chat): where the prefix cache keeps states.
    std::vector<int64_t> message_ends;
    static Prompt from_text(std::string t) {
        Prompt p;
        p.text = std::move(t);
        return p;
    }
    static Prompt from_ids(std::vector<int32_t> ids) {
        Prompt p;
        p.ids = std::move(ids);
        return p;
    }
    static Prompt from_messages(Json m) {
        Prompt p;
        p.messages = std::move(m);
        return p;
    }
};

enum class FinishReason { NONE, STOP, LENGTH, ABORT };
const char* finish_reason_name(FinishReason r);

struct RequestOutput {
    int64_t id = 0;
    std::vector<int32_t> new_tokens;
    std::string text_delta;
    std::vector<std::vector<TokenLogprob>> logprobs;  // per new token, when asked
    // SamplingParams::prompt_logprobs: per prompt token, once (with the first new token).
    std::vector<std::vector<TokenLogprob>> prompt_logprobs;
    FinishReason finish = FinishReason::NONE;
    int64_t prompt_tokens = 0, completion_tokens = 0;
};

struct EngineStats {
    int running = 0, waiting = 0;
    int32_t kv_blocks_total = 0, kv_blocks_free = 0;
    int32_t state_slots_total = 0, state_slots_free = 0;
    int64_t preemptions = 0;
    int64_t prompt_tokens = 0, generation_tokens = 0, finished = 0;
    PrefixCacheStats prefix;            // zeros when prefix caching is off
    int64_t prefix_snapshot_bytes = 0;  // one snapshot's size
    SpecCounters spec;                  // drafts verified and accepted, per position
    // GDN bytes the last step's verifications added: their staged input rows and the commit's read and
    // write of each verified sequence's state.
    int64_t spec_state_bytes_last_step = 0;
    int64_t spec_state_bytes_total = 0;
    int spec_k_last_step = 0;           // drafts per sequence the cost model chose for the last step
    int64_t grammar_masks = 0;          // structured outputs: token masks computed
    double grammar_mask_seconds = 0;    // and the time they took
    int64_t grammar_dead_ends = 0;      // masks that allowed nothing (a grammar bug; the request ended)
    std::string spec_cost_model;        // SpecCostModel::describe()
    SpecCostModel::Snapshot spec_cost;  // what the cost model's choices rest on (/metrics)
};

class VocabTrie;

class Engine {
  public:
    // Cache memory (KV blocks + GDN state slots) that holds n_seqs sequences of max_len tokens.
    static size_t cache_bytes_for(const ModelConfig& c, int n_seqs, int max_len, DType kv_dtype,
                                  int block_size = 16, const SpeculativeConfig& spec = {});
    // Speculation's verify staging rows of one running sequence (StateSlots::reserve_verify_rows).
    static size_t verify_bytes_per_seq(const ModelConfig& c, const SpeculativeConfig& spec);

    static Result<std::unique_ptr<Engine>> create(std::shared_ptr<const Model> model,
                                                  std::shared_ptr<const Tokenizer> tok,
                                                  const EngineConfig& cfg);

    ~Engine();
    Result<int64_t> add_request(const Prompt& prompt, const SamplingParams& params);
    // n samples of one prompt (OpenAI's n): ids in sample order. The first is admitted now; the others
    // wait until its prompt is computed, then start from the prefix cache (its KV blocks and the GDN
    // snapshot at the prompt's last block boundary), so the prompt is prefilled once and each further
    // sample computes only the tail after that boundary. With a seed, sample i uses seed + i.
    Result<std::vector<int64_t>> add_requests(const Prompt& prompt, const SamplingParams& params, int n);
    // Runs one step; the outputs of requests that progressed (or were aborted) this step. The span is
    // valid until the next call.
    std::span<const RequestOutput> step();
    // Thread-safe: the request is aborted at the next step (its blocks and slot freed there).
    void abort(int64_t id);
    bool has_unfinished() const { return !scheduler_->empty() || !held_.empty() || !pending_aborts_empty(); }

    const EngineConfig& config() const { return cfg_; }
    std::string memory_plan() const { return memory_plan_; }
    EngineStats stats() const;
    // Test hook: after each step's drafting, may replace a request's drafts (at most k of them) given its
    // tokens so far: drives verification through chosen accept / reject patterns.
    using DraftHook = std::function<void(int64_t id, const std::vector<int32_t>& tokens, int k,
                                         std::vector<int32_t>* drafts)>;
    void set_draft_hook(DraftHook h) { draft_hook_ = std::move(h); }
    // Test hook: replaces the prefix cache's block hash (a constant forces every block into one bucket).
    void set_prefix_hash_for_testing(BlockPool::HashFn f) { kv_->pool().set_hash_for_testing(std::move(f)); }
    // Drops every unused cached block and snapshot.
    void clear_prefix_cache() { scheduler_->clear_prefix_cache(); }
    // Test hook: pre-empt a running request now (recompute).
    bool force_preempt(int64_t id) { return scheduler_->preempt(id); }
    const Tokenizer& tokenizer() const { return *tok_; }
    // The checkpoint's chat template (null when it has none), for callers that render before add_request.
    const ChatTemplate* chat_template() const { return chat_.get(); }
    const ModelConfig& model_config() const { return model_->config(); }
    double last_step_host_seconds() const { return host_seconds_; }
    double last_step_forward_seconds() const { return forward_seconds_; }

  private:
    struct Request;
    Engine() = default;
    // create()'s parts: the cache memory plan (may lower cfg's max_num_seqs to what fits), its log line,
    // the caches' pages touched (--prefault), the step's buffers reserved at their largest.
    struct CachePlan;
    static Result<CachePlan> plan_cache(const ModelConfig& c, EngineConfig& cfg);
    static std::string describe_cache_plan(const ModelConfig& c, const EngineConfig& cfg, const CachePlan& p);
    void prefault_caches();
    void reserve_step_buffers(const CachePlan& p);
    bool pending_aborts_empty() const;
    // The phases of step(), in order.
    // Aborts requested since the last step (held samples of n > 1 requests included) finish now.
    void apply_aborts();
    // The batch plan of the scheduled chunks (plan_, chunk_rows_).
    void build_plan(const SchedulerOutput& so);
    // What the forward was run with, for the phases after it.
    struct StepForward {
        ForwardOptions options;
        bool all_greedy = false;  // the lm_head returned argmaxes (greedy_ids_), not rows of logits
        bool mtp = false;         // the final hidden rows were kept for the MTP drafter (hidden_)
    };
    // True when every row the step samples is plain greedy (no logprobs, penalties, bias, grammar).
    bool all_rows_plain_greedy(const SchedulerOutput& so) const;
    // The model forward over plan_ (and the prefill pacer's observation of it).
    StepForward run_forward(const SchedulerOutput& so);
    // Speculative verification: every verified chunk's verdict (verdicts_), then one commit of the
    // accepted tokens into the GDN states.
    void verify_and_commit(const SchedulerOutput& so, const StepForward& f);
    // Verdicts applied, prompts advanced, tokens sampled and emitted into the step's outputs. Returns
    // whether the step was pure decoding (one new token per chunk: what the cost model times).
    bool sample_and_emit(const SchedulerOutput& so, const StepForward& f);
    // Finished requests leave requests_ (their MTP rows recycled).
    void drop_finished();
    int64_t prompt_logprobs(Request& r, const ScheduledChunk& c, const float* logits);
    // Prefix caching (engine_prefix.cpp): the positions of a new request whose GDN state is kept, and the
    // state copies the scheduler asks for.
    std::vector<int64_t> snapshot_positions(const std::vector<int64_t>& message_ends, int64_t n_prompt) const;
    void do_state_copies(const std::vector<SlotCopy>& copies);
    void emit(Request& r, int32_t token, std::vector<TokenLogprob>* lp, RequestOutput& out);
    // Speculative decoding (engine_speculative.cpp).
    // A verification's outcome: the tokens it emits (the accepted drafts, then one from the target
    // distribution) and their logprobs.
    struct Verdict {
        int accepted = 0;
        std::vector<int32_t> tokens;
        std::vector<std::vector<TokenLogprob>> logprobs;
    };
    // Accepts the longest verified prefix of a chunk's drafts plus one token from the target distribution
    // (greedy: its argmax; sampling: rejection sampling) from the chunk's logits rows starting at `row`.
    // Changes nothing but the request's sampler and the acceptance counters.
    void decide(const ScheduledChunk& c, size_t row, bool all_greedy, Verdict& v);
    // After the commit of the step's verified GDN states: the request continues after the verdict's
    // tokens, which are emitted.
    void apply_verdict(const ScheduledChunk& c, Verdict& v, RequestOutput& out);
    void constrain(Request& r, float* logits);
    Result<std::unique_ptr<Request>> make_request(const Prompt& prompt, const SamplingParams& params);
    void admit(std::unique_ptr<Request> r);
    void release_held();
    struct Held {
        int64_t leader;
        std::unique_ptr<Request> req;
    };
    std::vector<Held> held_;  // samples 2..n of n > 1 requests, waiting for the first one's prompt
    // The hidden rows of a chunk's computed tokens, kept for the MTP layer's catch-up.
    void keep_mtp_rows(Request& r, int64_t first_pos, int64_t plan_row, int64_t n_rows);
    // After a step: drafts for the next one, as many per request as the cost model chooses.
    void propose_drafts();
    void mtp_drafts(const std::vector<Request*>& reqs, const std::vector<int>& k_of);
    void append_mtp_rows(Request& r);  // r's pending rows as one sequence of mtp_plan_
    void flush_mtp_rows(Request& r);
    void finish(Request& r, FinishReason why, RequestOutput& out);

    EngineConfig cfg_;
    std::shared_ptr<const Model> model_;
    std::shared_ptr<const Tokenizer> tok_;
    std::shared_ptr<const ChatTemplate> chat_;
    std::unique_ptr<KvCache> kv_;
    std::unique_ptr<StateSlots> slots_;
    std::unique_ptr<SnapshotCache> snapshots_;
    std::unique_ptr<Scheduler> scheduler_;
    PrefillPacer pacer_{0};  // the scheduler's prefill room beside decodes (cfg_.prefill_step_ms)
    std::string memory_plan_;
    std::vector<int32_t> eos_ids_;
    std::shared_ptr<const VocabTrie> vocab_trie_;  // built for the first structured-output request
    int64_t grammar_masks_ = 0, grammar_dead_ends_ = 0;
    double grammar_mask_seconds_ = 0;
    ExecContext ctx_ = ExecContext::process();  // EngineConfig::context, or the model's
    Sampler sampler_;
    ForwardWorkspacePtr forward_ws_;  // the buffers of this engine's forwards (model/forward_workspace.h)
    std::map<int64_t, std::unique_ptr<Request>> requests_;
    int64_t next_id_ = 1;
    BatchPlan plan_;
    std::vector<float> logits_;
    std::vector<int32_t> greedy_ids_;
    std::vector<int32_t> prompt_order_;  // prompt logprobs: the top-n sort
    RequestOutput& next_output(int64_t id);
    std::vector<RequestOutput> outputs_;  // reused records; the first n_outputs_ belong to this step
    size_t n_outputs_ = 0;
    mutable std::mutex abort_mu_;
    std::vector<int64_t> aborts_;
    // Speculative decoding state.
    SpecCostModel cost_;
    SpecCounters spec_;
    int k_planned_ = 0;         // drafts per sequence chosen for the coming step (-1: a probe)
    uint64_t probe_turn_ = 0;   // which sequence drafts in an n-gram acceptance probe
    int64_t mtp_keeper_ = -1;   // the request that probes MTP acceptance while k = 0 wins
    bool speculating_ = false;  // the last step's choice drafted (k > 0, not a probe)
    int64_t spec_state_bytes_ = 0, spec_state_bytes_total_ = 0;
    std::vector<Verdict> verdicts_;  // this step's, one per verified chunk (records reused)
    std::vector<Model::GdnCommit> commits_;
    std::vector<size_t> chunk_rows_;  // build_plan: each chunk's first logits row
    size_t slot_bytes_ = 0;
    size_t staged_row_bytes_ = 0;  // one token's verify staging rows (all GDN layers)
    std::vector<float> hidden_;    // the forward's final-norm rows (MTP)
    // While plain decoding wins (the cost model chose k = 0), the MTP layer runs only for a probe: every
    // request keeps up to this many pending rows (4 KiB each at H = 1024), caught up when it drafts again;
    // beyond it its MTP cache goes stale and it never drafts again (the catch-up costs about one decoder
    // layer per token). The probe interval stays below it (SpecCostModel::kMaxExplorePeriod), so the
    // probing request never goes stale.
    static constexpr int64_t kMaxPendingMtpRows = 1024;
    // Buffers for requests' pending MTP rows, one huge page each at least, touched at start-up with the
    // caches and handed back when a request ends: a row appended to fresh memory costs a page fault per
    // 4 KiB (docs/perf.md, behind the constants: engine/engine.h).
    std::vector<std::vector<float, HugePageAllocator<float>>> spare_mtp_rows_;
    void recycle_mtp_rows(Request& r);
    BatchPlan mtp_plan_;
    std::vector<float> mtp_in_, mtp_out_;
    std::vector<int32_t> mtp_ids_;
    // propose_drafts()' and the MTP drafting's per-step lists (grow-only: no allocation once warm).
    struct DraftLists {
        std::vector<Request*> decoding, rows_of, drafting;
        std::vector<int> k_of, kd;
        std::vector<float> last;
        std::vector<size_t> idx;
    } draft_lists_;
    DraftHook draft_hook_;
    double host_seconds_ = 0, forward_seconds_ = 0;
    double draft_seconds_ = 0;  // propose_drafts() at the end of the last step: the coming step's drafting
    int64_t prompt_tokens_total_ = 0, generation_tokens_total_ = 0, finished_total_ = 0;
};

}  // namespace gdn
