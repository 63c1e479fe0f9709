#include "engine/engine.h"
#include "structured/token_mask.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

#include "core/clock.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "engine/chat_prompt.h"
#include "engine/engine_request.h"

namespace gdn {

const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::NONE:
            return "";
        case FinishReason::STOP:
            return "stop";
        case FinishReason::LENGTH:
            return "length";
        case FinishReason::ABORT:
            return "abort";
    }
    return "";
}

Engine::~Engine() = default;

size_t Engine::cache_bytes_for(const ModelConfig& c, int n_seqs, int max_len, DType kv_dtype, int block_size,
                               const SpeculativeConfig& spec) {
    const bool mtp = spec.uses_mtp();
    const size_t block =
        KvCache::bytes_per_block(std::max(1, c.n_attention_layers()) + (mtp ? 1 : 0),
                                 static_cast<int64_t>(c.attn_kv_heads) * c.head_dim, block_size, kv_dtype);
    const size_t slot =
        StateSlots::bytes_per_slot(c.n_gdn_layers(), c.gdn_conv_state_floats(), c.gdn_ssm_state_floats()) +
        verify_bytes_per_seq(c, spec);
    return static_cast<size_t>(n_seqs) * (slot + ((max_len + block_size - 1) / block_size + 1) * block);
}

size_t Engine::verify_bytes_per_seq(const ModelConfig& c, const SpeculativeConfig& spec) {
    return spec.enabled() ? StateSlots::verify_bytes_per_seq(c.n_gdn_layers(), spec.tokens_per_verify(),
                                                             c.gdn_in_proj_floats())
                          : 0;
}

namespace {

Status engine_config_error(const std::string& m) {
    return Status::error("engine config: " + m);
}

// The checks that need no memory arithmetic.
Status check_engine_config(const EngineConfig& cfg, const Model& model) {
    if (cfg.block_size < 1 || cfg.block_size > 1024)
        return engine_config_error("block size must be in 1..1024");
    if (cfg.max_model_len < 2) return engine_config_error("max_model_len must be >= 2");
    if (cfg.max_num_seqs < 1) return engine_config_error("max_num_seqs must be >= 1");
    if (cfg.admit_prompt_tokens < 0)
        return engine_config_error("admit_prompt_tokens must be >= 0 (0: no limit)");
    if (cfg.prefill_step_ms < 0) return engine_config_error("prefill_step_ms must be >= 0 (0: no limit)");
    if (cfg.max_prefill_chunk < kPrefillChunkAlign)
        return engine_config_error(
            strprintf("the prefill chunk must be >= %d tokens (one GDN chunk)", kPrefillChunkAlign));
    if (cfg.max_num_batched_tokens < cfg.max_num_seqs + kPrefillChunkAlign)
        return engine_config_error(
            strprintf("max_num_batched_tokens (%d) must be >= max_num_seqs + %d (%d) so that a prefill chunk "
                      "always fits beside the decodes",
                      cfg.max_num_batched_tokens, kPrefillChunkAlign, cfg.max_num_seqs + kPrefillChunkAlign));
    const DType kv_dtype = cfg.kv_cache_dtype();
    if (kv_dtype != DType::F32 && kv_dtype != DType::BF16)
        return engine_config_error("the KV cache dtype must be f32 or bf16");
    if (cfg.speculative.uses_mtp() && !model.has_mtp())
        return engine_config_error(
            "MTP speculation needs the model's MTP layer: load it with LoadOptions::mtp (the tools do this "
            "for --speculative-config '{\"method\": \"mtp\", ...}')");
    if (kv_dtype == DType::BF16 && !cfg.bf16)
        return engine_config_error(
            "a bf16 KV cache needs bf16 activations (--dtype bf16): f32 mode keeps everything in f32");
    if (cfg.prefix_snapshot_interval < 0)
        return engine_config_error("the prefix snapshot interval must be >= 0 tokens");
    return Status::ok();
}

}  // namespace

// How --cache-memory splits: state slots first (one per running request, with its verify staging rows),
// the rest KV blocks; the prefix cache's snapshots in their own budget.
struct Engine::CachePlan {
    int n_attn = 0;   // attention layers with a KV cache (the MTP layer's rides along)
    int64_t row = 0;  // floats of one token's K (or V) row in one layer
    size_t block_bytes = 0, slot_bytes = 0, verify_bytes = 0;
    int64_t blocks_one_seq = 0;  // KV blocks of one max_model_len sequence
    int32_t n_slots = 0, n_snapshots = 0, n_blocks = 0;
    int rows_per_seq = 1;    // logits rows a sequence's step may return
    std::string clamp_note;  // why max_num_seqs was lowered ("" when it was not)
};

Result<Engine::CachePlan> Engine::plan_cache(const ModelConfig& c, EngineConfig& cfg) {
    CachePlan p;
    const SpeculativeConfig& spec = cfg.speculative;
    const bool mtp = spec.uses_mtp();
    const DType kv_dtype = cfg.kv_cache_dtype();
    p.row = static_cast<int64_t>(c.attn_kv_heads) * c.head_dim;
    p.n_attn = std::max(1, c.n_attention_layers()) + (mtp ? 1 : 0);
    p.block_bytes = KvCache::bytes_per_block(p.n_attn, p.row, cfg.block_size, kv_dtype);
    p.slot_bytes = std::max<size_t>(
        1, StateSlots::bytes_per_slot(c.n_gdn_layers(), c.gdn_conv_state_floats(), c.gdn_ssm_state_floats()));
    p.verify_bytes = verify_bytes_per_seq(c, spec);
    const size_t seq_state_bytes = p.slot_bytes + p.verify_bytes;
    p.blocks_one_seq = (cfg.max_model_len + cfg.block_size - 1) / cfg.block_size;
    const size_t min_kv = p.blocks_one_seq * p.block_bytes;
    if (cfg.cache_memory < min_kv + seq_state_bytes)
        return engine_config_error(
            strprintf("cache memory %.1f MiB cannot hold one sequence of max_model_len %d (%.1f MiB of KV + "
                      "%.1f MiB of GDN state): raise --cache-memory or lower --max-model-len",
                      cfg.cache_memory / 1048576.0, cfg.max_model_len, min_kv / 1048576.0,
                      seq_state_bytes / 1048576.0));
    const int64_t fit_seqs = static_cast<int64_t>((cfg.cache_memory - min_kv) / seq_state_bytes);
    if (cfg.max_num_seqs > fit_seqs) {
        p.clamp_note = strprintf(
            "max_num_seqs clamped from %d to %lld: only %lld sequences' GDN state (%.2f MiB each%s) fit "
            "in --cache-memory beside one max-length sequence's KV",
            cfg.max_num_seqs, (long long)fit_seqs, (long long)fit_seqs, seq_state_bytes / 1048576.0,
            p.verify_bytes ? ", verify staging included" : "");
        cfg.max_num_seqs = static_cast<int>(fit_seqs);
        GDN_LOG_WARN("%s", p.clamp_note.c_str());
        cfg.max_num_batched_tokens =
            std::max(cfg.max_num_batched_tokens, cfg.max_num_seqs + kPrefillChunkAlign);
    }
    p.n_slots = cfg.max_num_seqs;
    p.rows_per_seq = spec.tokens_per_verify();
    p.n_snapshots =
        cfg.enable_prefix_caching
            ? static_cast<int32_t>(std::min<size_t>(cfg.prefix_cache_memory / p.slot_bytes, 1 << 20))
            : 0;
    if (cfg.enable_prefix_caching && c.n_gdn_layers() > 0 && p.n_snapshots == 0)
        GDN_LOG_WARN(
            "--prefix-cache-memory %.1f MiB holds no GDN state snapshot (%.2f MiB each): prefix caching "
            "will find no hits",
            cfg.prefix_cache_memory / 1048576.0, p.slot_bytes / 1048576.0);
    p.n_blocks = static_cast<int32_t>((cfg.cache_memory - p.n_slots * seq_state_bytes) / p.block_bytes);
    return p;
}

std::string Engine::describe_cache_plan(const ModelConfig& c, const EngineConfig& cfg, const CachePlan& p) {
    const SpeculativeConfig& spec = cfg.speculative;
    const bool mtp = spec.uses_mtp();
    const size_t seq_state_bytes = p.slot_bytes + p.verify_bytes;
    const std::string spec_note =
        spec.enabled()
            ? strprintf(
                  " + verify staging %.2f MiB per sequence (speculation %s: %d tokens' GDN input rows%s)",
                  p.verify_bytes / 1048576.0, spec.describe().c_str(), p.rows_per_seq,
                  mtp ? strprintf(
                            "; beside it in host memory, pending MTP rows: %.0f MiB per sequence, up to %lld "
                            "rows (%.1f MiB) while plain decoding keeps them",
                            Buffer::kHugePage / 1048576.0, (long long)kMaxPendingMtpRows,
                            kMaxPendingMtpRows * c.hidden * sizeof(float) / 1048576.0)
                            .c_str()
                      : "")
            : "";
    return strprintf(
        "memory plan: KV block %d tokens = %.1f KiB (%s, %d attention layers%s); %d blocks = %lld tokens "
        "(%.1f MiB); "
        "GDN state slot %.2f MiB (%d layers); %d slots%s (%.1f MiB); max_model_len %d, max_num_seqs %d, "
        "max_num_batched_tokens %d; %s%s%s",
        cfg.block_size, p.block_bytes / 1024.0, dtype_name(cfg.kv_cache_dtype()), p.n_attn,
        mtp ? " incl. MTP" : "", p.n_blocks, (long long)p.n_blocks * cfg.block_size,
        p.n_blocks * p.block_bytes / 1048576.0, p.slot_bytes / 1048576.0, c.n_gdn_layers(), p.n_slots,
        spec_note.c_str(), p.n_slots * seq_state_bytes / 1048576.0, cfg.max_model_len, cfg.max_num_seqs,
        cfg.max_num_batched_tokens,
        cfg.enable_prefix_caching
            ? strprintf(
                  "prefix cache: %d GDN state snapshots (%.1f MiB of --prefix-cache-memory %.1f MiB), every "
                  "%d prompt tokens and at message, prompt and generation ends",
                  p.n_snapshots, p.n_snapshots * p.slot_bytes / 1048576.0,
                  cfg.prefix_cache_memory / 1048576.0, cfg.prefix_snapshot_interval)
                  .c_str()
            : "prefix caching off",
        p.clamp_note.empty() ? "" : "\n", p.clamp_note.c_str());
}

void Engine::prefault_caches() {
    const double t0 = now_seconds();
    size_t bytes = 0;
    for (auto& rows : spare_mtp_rows_) {  // touched (zeros) and emptied: clear() keeps the capacity
        rows.resize(rows.capacity());
        rows.clear();
        bytes += rows.capacity() * sizeof(float);
    }
    std::vector<Buffer*> bufs = kv_->buffers();
    for (Buffer* b : slots_->buffers()) bufs.push_back(b);
    for (Buffer* b : bufs) {
        ctx_.pool().parallel_for(static_cast<int64_t>(b->pages()),
                                 [&](int64_t p0, int64_t p1) { b->prefault(p0, p1); });
        bytes += b->size();
    }
    GDN_LOG_INFO("cache memory touched at start-up: %.1f MiB in %.2f s", bytes / 1048576.0,
                 now_seconds() - t0);
}

void Engine::reserve_step_buffers(const CachePlan& cp) {
    const ModelConfig& c = model_->config();
    logits_.reserve(static_cast<size_t>(cfg_.max_num_seqs) * cp.rows_per_seq * c.vocab);
    greedy_ids_.reserve(static_cast<size_t>(cfg_.max_num_seqs) * cp.rows_per_seq);
    // Plan buffers at their largest, so building a plan never allocates.
    BatchPlan& p = plan_;
    const size_t T = cfg_.max_num_batched_tokens, S = cfg_.max_num_seqs;
    p.token_ids.reserve(T);
    p.positions.reserve(T);
    p.slot_mapping.reserve(T);
    p.cu_seqlens.reserve(S + 1);
    p.state_slot.reserve(S);
    p.has_initial_state.reserve(S);
    p.logits_rows.reserve(S * cp.rows_per_seq);
    p.gdn_out_offset.reserve(S + 1);
    p.gdn_out_slot.reserve(S);
    p.gdn_verify.reserve(S);
    p.block_tables.reserve(S * cp.blocks_one_seq);
}

Result<std::unique_ptr<Engine>> Engine::create(std::shared_ptr<const Model> model,
                                               std::shared_ptr<const Tokenizer> tok,
                                               const EngineConfig& cfg_in) {
    EngineConfig cfg = cfg_in;
    const ModelConfig& c = model->config();
    GDN_RETURN_IF_ERROR(check_engine_config(cfg, *model));
    GDN_ASSIGN_OR_RETURN(const CachePlan cp, plan_cache(c, cfg));
    auto e = std::unique_ptr<Engine>(new Engine());
    e->ctx_ = cfg.context ? *cfg.context : model->context();
    e->sampler_ = Sampler(e->ctx_);
    e->forward_ws_ = new_forward_workspace(e->ctx_);
    e->memory_plan_ = describe_cache_plan(c, cfg, cp);
    GDN_LOG_INFO("%s", e->memory_plan_.c_str());
    const SpeculativeConfig& spec = cfg.speculative;
    const bool mtp = spec.uses_mtp();
    e->cfg_ = cfg;
    e->model_ = std::move(model);
    e->tok_ = std::move(tok);
    e->kv_ = std::make_unique<KvCache>(c.n_attention_layers() + (mtp ? 1 : 0), cp.row, cp.n_blocks,
                                       cfg.block_size, cfg.kv_cache_dtype());
    e->slot_bytes_ = cp.slot_bytes;
    e->staged_row_bytes_ = StateSlots::verify_bytes_per_seq(c.n_gdn_layers(), 1, c.gdn_in_proj_floats());
    e->cost_.reset(spec.max_drafts());
    e->slots_ = std::make_unique<StateSlots>(c.n_gdn_layers(), c.gdn_conv_state_floats(),
                                             c.gdn_ssm_state_floats(), cp.n_slots + cp.n_snapshots);
    if (cp.verify_bytes)
        e->slots_->reserve_verify_rows(cfg.max_num_seqs, cp.rows_per_seq, c.gdn_in_proj_floats());
    // Pending MTP row buffers, one huge page each, handed to requests and back (keep_mtp_rows).
    if (mtp)
        for (int i = 0; i < cfg.max_num_seqs; ++i)
            e->spare_mtp_rows_.emplace_back().reserve(HugePageAllocator<float>::kPerPage);
    if (cfg.prefault_memory) e->prefault_caches();
    SchedulerConfig sc;
    sc.max_num_seqs = cfg.max_num_seqs;
    sc.max_num_batched_tokens = cfg.max_num_batched_tokens;
    sc.max_prefill_chunk = cfg.max_prefill_chunk;
    sc.admit_prompt_tokens = cfg.admit_prompt_tokens;
    e->scheduler_ =
        std::make_unique<Scheduler>(sc, e->kv_->pool(), e->slots_.get(), cp.n_slots, cfg.block_size);
    e->pacer_ = PrefillPacer(cfg.prefill_step_ms / 1000.0);
    if (cfg.enable_prefix_caching) {
        e->snapshots_ = std::make_unique<SnapshotCache>(cp.n_snapshots, cp.n_blocks);
        e->scheduler_->enable_prefix_cache(e->snapshots_.get());
    }
    e->eos_ids_ = c.eos_token_ids;
    if (e->tok_ && e->tok_->eos_token_id() >= 0 &&
        std::find(e->eos_ids_.begin(), e->eos_ids_.end(), e->tok_->eos_token_id()) == e->eos_ids_.end())
        e->eos_ids_.push_back(e->tok_->eos_token_id());
    if (e->tok_ && !e->tok_->chat_template().empty()) {
        GDN_ASSIGN_OR_RETURN(e->chat_, ChatTemplate::create(*e->tok_));
    }
    e->reserve_step_buffers(cp);
    return e;
}

Result<int64_t> Engine::add_request(const Prompt& prompt, const SamplingParams& params) {
    GDN_ASSIGN_OR_RETURN(auto ids, add_requests(prompt, params, 1));
    return ids[0];
}

Result<std::vector<int64_t>> Engine::add_requests(const Prompt& prompt, const SamplingParams& params, int n) {
    if (n < 1) return Status::error(strprintf("n must be >= 1 (got %d)", n));
    std::vector<std::unique_ptr<Request>> reqs;
    for (int i = 0; i < n; ++i) {
        SamplingParams p = params;
        if (p.seed)
            p.seed = *p.seed + static_cast<uint64_t>(i);  // sample i: seed + i (distinct, reproducible)
        // Samples that start from the first one's prefix cache cannot compute them: its output carries them.
        if (i > 0 && cfg_.enable_prefix_caching) p.prompt_logprobs = -1;
        GDN_ASSIGN_OR_RETURN(auto r, make_request(prompt, p));
        reqs.push_back(std::move(r));
    }
    std::vector<int64_t> ids;
    for (auto& r : reqs) ids.push_back(r->sched->id);
    admit(std::move(reqs[0]));
    // The others start once the first one's prompt is computed, from the prefix cache (without it,
    // now: each computes its prompt).
    for (size_t i = 1; i < reqs.size(); ++i) {
        if (cfg_.enable_prefix_caching)
            held_.push_back({ids[0], std::move(reqs[i])});
        else
            admit(std::move(reqs[i]));
    }
    return ids;
}

void Engine::admit(std::unique_ptr<Request> r) {
    const int64_t id = r->sched->id;
    scheduler_->add(r->sched);
    prompt_tokens_total_ += r->sched->num_prompt;
    requests_.emplace(id, std::move(r));
}

// Held samples of an n > 1 request whose first sample has computed its prompt (or ended) start now.
void Engine::release_held() {
    for (size_t i = 0; i < held_.size();) {
        auto it = requests_.find(held_[i].leader);
        const bool ready = it == requests_.end() || it->second->finish != FinishReason::NONE ||
                           it->second->sched->num_computed >= it->second->sched->num_prompt;
        if (!ready) {
            ++i;
            continue;
        }
        admit(std::move(held_[i].req));
        held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(i));
    }
}

Result<std::unique_ptr<Engine::Request>> Engine::make_request(const Prompt& prompt,
                                                              const SamplingParams& params) {
    const int32_t V = model_->config().vocab;
    GDN_RETURN_IF_ERROR(params.validate(V));
    std::vector<int32_t> ids;
    std::vector<int64_t> message_ends = prompt.message_ends;
    if (!prompt.messages.is_null()) {
        if (!chat_) return Status::error("this model has no chat template; send a prompt instead");
        GDN_ASSIGN_OR_RETURN(RenderedChat rc, render_chat(*chat_, *tok_, prompt, cfg_.enable_prefix_caching));
        ids = std::move(rc.ids);
        message_ends = std::move(rc.message_ends);
    } else if (!prompt.ids.empty()) {
        ids = prompt.ids;
        for (int32_t t : ids)
            if (t < 0 || t >= V)
                return Status::error(strprintf("prompt token id %d is out of range [0, %d)", t, V));
    } else {
        if (!tok_) return Status::error("no tokenizer loaded: send token ids");
        ids = tok_->encode(prompt.text);
    }
    if (ids.empty()) return Status::error("the prompt is empty");
    const int64_t n = static_cast<int64_t>(ids.size());
    if (n >= cfg_.max_model_len)
        return Status::error(
            strprintf("the prompt is %lld tokens, but the maximum context length (--max-model-len) "
                      "is %d tokens",
                      (long long)n, cfg_.max_model_len));
    auto r = std::make_unique<Request>();
    r->params = params;
    r->params.max_tokens = static_cast<int>(std::min<int64_t>(params.max_tokens, cfg_.max_model_len - n));
    r->params.min_tokens = std::min(r->params.min_tokens, r->params.max_tokens);
    r->sampler.rng.seed(params.seed ? *params.seed : std::random_device{}());
    r->prompt = ids;
    if (tok_) r->decoder = std::make_unique<StreamDecoder>(tok_, params.skip_special_tokens);
    if (params.grammar) {
        if (!tok_) return Status::error("structured outputs need the model's tokenizer");
        if (!vocab_trie_) {
            const double t0 = now_seconds();
            vocab_trie_ = std::make_shared<VocabTrie>(*tok_, model_->config().vocab);
            GDN_LOG_INFO("structured outputs: token trie of %d tokens, %zu nodes, built in %.0f ms",
                         vocab_trie_->vocab(), vocab_trie_->nodes(), (now_seconds() - t0) * 1e3);
        }
        r->constraint =
            std::make_unique<TokenConstraint>(params.grammar, vocab_trie_, params.grammar_after_reasoning);
    }
    for (const auto& s : params.stop) r->max_stop = std::max(r->max_stop, s.size());
    for (const auto& s : params.stop_inclusive) r->max_stop = std::max(r->max_stop, s.size());
    r->sched = std::make_shared<SchedRequest>();
    r->sched->id = next_id_++;
    r->sched->tokens = std::move(ids);
    r->sched->tokens.reserve(n + r->params.max_tokens);  // no reallocation while generating
    r->output.reserve(r->params.max_tokens);
    r->sched->blocks.reserve((n + r->params.max_tokens + cfg_.block_size - 1) / cfg_.block_size);
    r->sched->num_prompt = n;
    r->sched->max_total_tokens = n + r->params.max_tokens;
    r->sched->prompt_rows = params.prompt_logprobs >= 0;
    if (cfg_.enable_prefix_caching) r->sched->snapshot_at = snapshot_positions(message_ends, n);
    return r;
}

void Engine::abort(int64_t id) {
    std::lock_guard<std::mutex> lock(abort_mu_);
    aborts_.push_back(id);
}

bool Engine::pending_aborts_empty() const {
    std::lock_guard<std::mutex> lock(abort_mu_);
    return aborts_.empty();
}

void Engine::finish(Request& r, FinishReason why, RequestOutput& out) {
    r.finish = why;
    out.finish = why;
    if (why != FinishReason::ABORT && r.decoder) {
        r.text += r.decoder->finish();
        if (r.emitted < r.text.size()) {
            out.text_delta += r.text.substr(r.emitted);
            r.emitted = r.text.size();
        }
    }
    if (why != FinishReason::ABORT) flush_mtp_rows(r);
    scheduler_->finish(r.sched->id);
    finished_total_++;
}

// Appends a sampled token: text delta (held back while it could still be the start of a stop string),
// then the stop conditions.
void Engine::emit(Request& r, int32_t token, std::vector<TokenLogprob>* lp, RequestOutput& out) {
    r.output.push_back(token);
    r.sched->tokens.push_back(token);
    out.new_tokens.push_back(token);
    if (lp) out.logprobs.push_back(*lp);
    generation_tokens_total_++;
    const bool is_eos = std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end();
    const bool is_stop_id = std::find(r.params.stop_token_ids.begin(), r.params.stop_token_ids.end(),
                                      token) != r.params.stop_token_ids.end();
    if ((is_eos && !r.params.ignore_eos) || is_stop_id) {
        finish(r, FinishReason::STOP, out);
        return;
    }
    if (r.decoder) {
        auto piece = r.decoder->add(token);
        if (piece) r.text += *piece;
        if (r.constraint) r.constraint->accept(token, piece ? *piece : std::string());
        if (r.max_stop > 0) {
            const size_t from = r.emitted >= r.max_stop ? r.emitted - r.max_stop + 1 : 0;
            size_t best = std::string::npos, best_len = 0;  // the earliest match (the longest there)
            bool keep = false;                              // the match stays in the text
            auto look = [&](const std::vector<std::string>& stops, bool kept) {
                for (const auto& s : stops) {
                    const size_t at = r.text.find(s, from);
                    if (at < best || (at == best && at != std::string::npos && s.size() > best_len))
                        best = at, best_len = s.size(), keep = kept;
                }
            };
            look(r.params.stop, r.params.include_stop_str_in_output);
            look(r.params.stop_inclusive, true);
            if (best != std::string::npos) {
                if (keep) best += best_len;
                if (best > r.emitted) out.text_delta += r.text.substr(r.emitted, best - r.emitted);
                r.emitted = std::max(r.emitted, best);
                r.text.resize(r.emitted);
                r.decoder
                    .reset();  // anything after the stop string (and by default the string) is not returned
                finish(r, FinishReason::STOP, out);
                return;
            }
        }
        size_t safe = r.text.size();
        if (r.max_stop > 1) {
            safe = r.text.size() >= r.max_stop - 1 ? r.text.size() - (r.max_stop - 1) : 0;
            while (safe > r.emitted && safe < r.text.size() &&
                   (static_cast<uint8_t>(r.text[safe]) & 0xC0) == 0x80)
                --safe;
        }
        if (safe > r.emitted) {
            out.text_delta += r.text.substr(r.emitted, safe - r.emitted);
            r.emitted = safe;
        }
    }
    if (static_cast<int>(r.output.size()) >= r.params.max_tokens) finish(r, FinishReason::LENGTH, out);
}

// Structured outputs: the grammar's mask on this request's logits row. A dead end (nothing allowed,
// which a correct grammar never reaches) lets end-of-sequence through instead of sampling garbage.
void Engine::constrain(Request& r, float* logits) {
    const double t0 = now_seconds();
    if (!r.constraint->mask(logits, eos_ids_)) {
        grammar_dead_ends_++;
        GDN_LOG_WARN("structured output of request %lld reached a dead end: ending it",
                     (long long)r.sched->id);
        for (int32_t t : eos_ids_) logits[t] = 0.0f;
    }
    grammar_masks_++;
    grammar_mask_seconds_ += now_seconds() - t0;
}

// A prefill chunk of a request that wants prompt logprobs: its rows (from `logits`) whose next token is
// a prompt token give that token's logprob; returns how many rows it read. When the prompt is done, the
// request stops asking for rows (the next output carries the list).
int64_t Engine::prompt_logprobs(Request& r, const ScheduledChunk& c, const float* logits) {
    SchedRequest& s = *c.req;
    const int32_t V = model_->config().vocab;
    if (s.num_computed == 0 && r.prompt_logprobs.empty()) r.prompt_logprobs.push_back({{s.tokens[0], NAN}});
    int64_t rows = 0;
    for (int64_t pos = s.num_computed; pos < s.num_computed + c.num_new && pos + 1 < s.num_prompt;
         ++pos, ++rows) {
        if (pos + 1 < static_cast<int64_t>(r.prompt_logprobs.size()))
            continue;  // recomputed after a preemption
        r.prompt_logprobs.emplace_back();
        token_logprobs(logits + rows * V, V, s.tokens[pos + 1], r.params.prompt_logprobs,
                       &r.prompt_logprobs.back(), &prompt_order_);
    }
    if (static_cast<int64_t>(r.prompt_logprobs.size()) == s.num_prompt) s.prompt_rows = false;
    return rows;
}

void Engine::build_plan(const SchedulerOutput& so) {
    BatchPlan& p = plan_;
    p.clear();
    int64_t max_blocks = 1;
    for (const auto& c : so.chunks) max_blocks = std::max<int64_t>(max_blocks, c.req->blocks.size());
    p.max_blocks = max_blocks;
    p.cu_seqlens.push_back(0);
    chunk_rows_.clear();
    // Per-token GDN output slots: decode steps that keep their input state (prefix cache).
    const bool outs = cfg_.enable_prefix_caching;
    if (outs) p.gdn_out_offset.push_back(0);
    for (const auto& c : so.chunks) {
        SchedRequest& r = *c.req;
        const int64_t n_real = c.num_new - c.num_draft;  // then the drafts
        for (int64_t i = 0; i < c.num_new; ++i) {
            const int64_t pos = r.num_computed + i;
            p.token_ids.push_back(i < n_real ? r.tokens[pos] : r.drafts[i - n_real]);
            p.positions.push_back(pos);
            p.slot_mapping.push_back(kv_->slot_of(r.blocks.data(), pos));
        }
        p.cu_seqlens.push_back(p.n_tokens());
        p.state_slot.push_back(r.slot);
        p.has_initial_state.push_back(r.num_computed > 0 ? 1 : 0);
        p.push_block_table(r.blocks);
        chunk_rows_.push_back(p.logits_rows.size());
        if (cfg_.speculative.enabled()) p.gdn_verify.push_back(c.num_draft > 0);
        if (c.num_draft > 0) {
            // A verification: logits for every row; the GDN state is only read (commit_verified writes
            // the accepted tokens' states after sampling).
            for (int64_t i = c.num_new; i > 0; --i) p.logits_rows.push_back(p.n_tokens() - i);
        } else {
            // Prompt logprobs: the rows whose next token is a prompt token.
            if (r.prompt_rows)
                for (int64_t i = 0; i < c.num_new && r.num_computed + i + 1 < r.num_prompt; ++i)
                    p.logits_rows.push_back(p.n_tokens() - c.num_new + i);
            // Logits where the chunk reaches the end of the known tokens (a new token is sampled there).
            if (r.num_computed + c.num_new == static_cast<int64_t>(r.tokens.size()))
                p.logits_rows.push_back(p.n_tokens() - 1);
        }
        if (c.num_draft == 0 && c.fresh_slot >= 0)
            p.gdn_out_slot.push_back(c.fresh_slot);  // a one-token step
        if (outs) p.gdn_out_offset.push_back(static_cast<int64_t>(p.gdn_out_slot.size()));
    }
}

RequestOutput& Engine::next_output(int64_t id) {
    // Output records are reused across steps (their vectors keep their capacity): no allocation per step.
    if (n_outputs_ == outputs_.size()) outputs_.emplace_back();
    RequestOutput& o = outputs_[n_outputs_++];
    o.id = id;
    o.new_tokens.clear();
    o.text_delta.clear();
    o.logprobs.clear();
    o.prompt_logprobs.clear();
    o.finish = FinishReason::NONE;
    o.prompt_tokens = o.completion_tokens = 0;
    return o;
}

// One engine step, as its phases: abort, schedule, plan, forward, verify and commit, sample and emit,
// then the drafts for the next step and the cost model's observation of this one.
std::span<const RequestOutput> Engine::step() {
    const double t0 = now_seconds();
    n_outputs_ = 0;
    apply_aborts();
    release_held();
    const SchedulerOutput& so = scheduler_->schedule();
    const int k_this_step = k_planned_;
    spec_state_bytes_ = 0;
    do_state_copies(so.restores);  // prefix-cache hits start from their snapshots
    scheduler_->restores_done();
    bool pure_decode = false;
    if (!so.chunks.empty()) {
        build_plan(so);
        const StepForward f = run_forward(so);
        verify_and_commit(so, f);
        pure_decode = sample_and_emit(so, f);
    }
    spec_state_bytes_total_ += spec_state_bytes_;
    drop_finished();
    // A step's cost for the cost model: its own work plus the drafting done for it at the end of the
    // step before, not the drafting for the next one (whose k may differ: a plain step before a verify
    // was timed with that verify's drafts, and plain decoding looked 30% slower than it is on the demo).
    const double t_done = now_seconds(), drafting_for_this_step = draft_seconds_;
    propose_drafts();
    draft_seconds_ = now_seconds() - t_done;
    if (pure_decode && k_this_step >= 0)
        cost_.observe_step(static_cast<int>(so.chunks.size()), k_this_step,
                           t_done - t0 + drafting_for_this_step);
    host_seconds_ = now_seconds() - t0 - forward_seconds_;
    return {outputs_.data(), n_outputs_};
}

void Engine::apply_aborts() {
    std::vector<int64_t> ids;
    {
        std::lock_guard<std::mutex> lock(abort_mu_);
        ids.swap(aborts_);
    }
    for (int64_t id : ids) {
        for (size_t h = 0; h < held_.size(); ++h)  // a held sample of an n > 1 request: it never started
            if (held_[h].req->sched->id == id) {
                admit(std::move(held_[h].req));
                held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(h));
                break;
            }
        auto it = requests_.find(id);  // (aborts are rare: the id list above may allocate)
        if (it == requests_.end() || it->second->finish != FinishReason::NONE) continue;
        RequestOutput& out = next_output(id);
        out.prompt_tokens = it->second->sched->num_prompt;
        out.completion_tokens = static_cast<int64_t>(it->second->output.size());
        finish(*it->second, FinishReason::ABORT, out);
    }
}

bool Engine::all_rows_plain_greedy(const SchedulerOutput& so) const {
    for (const auto& c : so.chunks) {
        if (c.req->prompt_rows) return false;  // rows of logits, not argmaxes
        if (c.num_draft == 0 && c.req->num_computed + c.num_new != static_cast<int64_t>(c.req->tokens.size()))
            continue;  // a prompt chunk that samples nothing
        const Request& r = *requests_.at(c.req->id);
        if (!(r.params.greedy() && r.params.logprobs < 0 && r.params.repetition_penalty == 1.0f &&
              r.params.presence_penalty == 0.0f && r.params.frequency_penalty == 0.0f &&
              r.params.logit_bias.empty() && !r.constraint &&
              static_cast<int>(r.output.size()) >= r.params.min_tokens))
            return false;
    }
    return true;
}

Engine::StepForward Engine::run_forward(const SchedulerOutput& so) {
    StepForward f;
    f.options.bf16_activations = cfg_.bf16;
    // On the reference path too, results must not depend on how a sequence was split into steps: the
    // token-by-token form of the reference delta rule is chunk-invariant, the chunked form is not.
    f.options.gdn_form = GdnForm::RECURRENT;
    f.mtp = cfg_.speculative.uses_mtp();
    // When every row to sample is plain greedy, the lm_head returns argmaxes, not vocabulary rows.
    f.all_greedy = all_rows_plain_greedy(so);
    logits_.clear();
    greedy_ids_.clear();
    hidden_.clear();
    const double tf = now_seconds();
    Status st = model_->forward(*forward_ws_, plan_, *kv_, *slots_, f.options, &logits_,
                                f.all_greedy ? &greedy_ids_ : nullptr, f.mtp ? &hidden_ : nullptr);
    forward_seconds_ = now_seconds() - tf;
    int64_t prefill_tokens = 0;  // a chunk of one token counts as a decode
    for (const auto& c : so.chunks)
        if (c.num_new - c.num_draft > 1) prefill_tokens += c.num_new - c.num_draft;
    pacer_.observe(prefill_tokens, forward_seconds_, kPrefillChunkAlign);
    scheduler_->set_prefill_room(
        static_cast<int>(std::min<int64_t>(pacer_.room(), cfg_.max_num_batched_tokens)));
    GDN_CHECK(st.is_ok(), "forward failed on a plan the engine built: %s", st.message().c_str());
    return f;
}

void Engine::verify_and_commit(const SchedulerOutput& so, const StepForward& f) {
    // The verdicts first, then one commit of every verified sequence's accepted tokens into its GDN state
    // (the forward left the states as they were); the bookkeeping is sample_and_emit's.
    size_t n_verdicts = 0;
    commits_.clear();
    for (size_t ci = 0; ci < so.chunks.size(); ++ci) {
        const ScheduledChunk& c = so.chunks[ci];
        if (c.num_draft == 0) continue;
        if (verdicts_.size() == n_verdicts) verdicts_.emplace_back();
        Verdict& v = verdicts_[n_verdicts++];
        decide(c, chunk_rows_[ci], f.all_greedy, v);
        const int32_t to = c.fresh_slot >= 0 ? c.fresh_slot : c.req->slot;
        commits_.push_back({static_cast<int32_t>(ci), c.req->slot, to, 1 + int64_t{v.accepted}});
        // Extra GDN bytes of a verification: its staged rows, and the commit's pass over the state.
        spec_state_bytes_ += static_cast<int64_t>(staged_row_bytes_ * c.num_new + 2 * slot_bytes_);
    }
    if (commits_.empty()) return;
    Status st = model_->commit_verified(*forward_ws_, commits_, *slots_, f.options);
    GDN_CHECK(st.is_ok(), "GDN commit failed on verifications the engine planned: %s", st.message().c_str());
}

bool Engine::sample_and_emit(const SchedulerOutput& so, const StepForward& f) {
    bool pure_decode = true;
    size_t n_verdicts = 0;
    const int32_t V = model_->config().vocab;
    size_t row = 0;
    std::vector<TokenLogprob> lp;
    for (size_t ci = 0; ci < so.chunks.size(); ++ci) {
        const ScheduledChunk& c = so.chunks[ci];
        Request& r = *requests_.at(c.req->id);
        const int64_t first_pos = c.req->num_computed;
        pure_decode &=
            c.num_new - c.num_draft == 1 && first_pos + 1 == static_cast<int64_t>(c.req->tokens.size());
        if (c.num_draft > 0) {
            RequestOutput& out = next_output(c.req->id);
            const int64_t before = c.req->num_computed;
            GDN_CHECK(row == chunk_rows_[ci], "logits rows out of step");
            row += c.num_draft + 1;
            apply_verdict(c, verdicts_[n_verdicts++], out);  // on_verified inside
            do_state_copies(scheduler_->pending_copies());
            scheduler_->pending_copies().clear();
            if (f.mtp && r.finish == FinishReason::NONE)
                keep_mtp_rows(r, first_pos, plan_.cu_seqlens[ci], c.req->num_computed - before);
            out.prompt_tokens = c.req->num_prompt;
            out.completion_tokens = static_cast<int64_t>(r.output.size());
            continue;
        }
        const bool sampled = c.req->num_computed + c.num_new == static_cast<int64_t>(c.req->tokens.size());
        if (c.req->prompt_rows) row += prompt_logprobs(r, c, logits_.data() + row * V);
        scheduler_->on_computed(c);
        do_state_copies(scheduler_->pending_copies());
        scheduler_->pending_copies().clear();
        if (f.mtp) keep_mtp_rows(r, first_pos, plan_.cu_seqlens[ci], c.num_new);
        if (!sampled) continue;
        RequestOutput& out = next_output(c.req->id);
        if (!f.all_greedy && r.constraint) constrain(r, logits_.data() + row * V);
        const int32_t token =
            f.all_greedy ? greedy_ids_[row]
                         : sampler_.sample(logits_.data() + row * V, V, r.params, r.sampler, r.prompt,
                                           r.output, eos_ids_, r.params.logprobs >= 0 ? &lp : nullptr);
        ++row;
        if (!r.prompt_logprobs.empty() && !c.req->prompt_rows)
            out.prompt_logprobs = std::move(r.prompt_logprobs);
        emit(r, token, r.params.logprobs >= 0 ? &lp : nullptr, out);
        out.prompt_tokens = c.req->num_prompt;
        out.completion_tokens = static_cast<int64_t>(r.output.size());
    }
    return pure_decode;
}

void Engine::drop_finished() {
    for (auto it = requests_.begin(); it != requests_.end();) {
        if (it->second->finish == FinishReason::NONE) {
            ++it;
            continue;
        }
        recycle_mtp_rows(*it->second);
        it = requests_.erase(it);
    }
}

EngineStats Engine::stats() const {
    EngineStats s;
    s.running = scheduler_->n_running();
    s.waiting = scheduler_->n_waiting();
    s.kv_blocks_total = kv_->pool().n_blocks();
    s.kv_blocks_free = kv_->pool().n_free();
    s.state_slots_total = slots_->n_slots();
    // Snapshots count as free: an allocation evicts them (a leaked slot still shows as missing).
    s.state_slots_free = slots_->n_free() + (snapshots_ ? snapshots_->size() : 0);
    s.preemptions = scheduler_->total_preemptions();
    s.prompt_tokens = prompt_tokens_total_;
    s.generation_tokens = generation_tokens_total_;
    s.finished = finished_total_;
    s.grammar_masks = grammar_masks_;
    s.grammar_mask_seconds = grammar_mask_seconds_;
    s.grammar_dead_ends = grammar_dead_ends_;
    s.prefix = scheduler_->prefix_stats();
    s.prefix_snapshot_bytes = static_cast<int64_t>(slot_bytes_);
    s.spec = spec_;
    s.spec_state_bytes_last_step = spec_state_bytes_;
    s.spec_state_bytes_total = spec_state_bytes_total_;
    s.spec_k_last_step = std::max(k_planned_, 0);
    if (cfg_.speculative.enabled()) {
        s.spec_cost_model = cost_.describe();
        s.spec_cost = cost_.snapshot();
    }
    return s;
}

}  // namespace gdn
