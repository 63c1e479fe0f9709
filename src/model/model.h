// Model: config + weights + the forward pass over a batch of sequences (prefill and decode alike).
// One forward serves all three families: after the load-time transforms in weights.cpp, Qwen3-Next
// and Qwen3.5 differ only in which layers are MoE and whether top-k weights are renormalised.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/exec_context.h"
#include "core/status.h"
#include "model/batch_plan.h"
#include "model/config.h"
#include "model/state.h"
#include "model/weights.h"

namespace gdn {

enum class GdnForm { AUTO, RECURRENT, CHUNKED };  // selects the form of the REFERENCE delta rule

class CacheAccess;
class KvCache;
class StateSlots;

struct ForwardOptions {
    // bf16: the inputs of every weight matmul are bf16 (bf16 x bf16 products, f32 accumulation); the
    // residual stream, norms, GDN state and attention stay f32. This is both the fast mode and the more
    // accurate one (golden/README.md "gemm" rounding).
    bool bf16_activations = false;
    // With bf16, additionally round every activation where HF's bf16 forward rounds (emulates HF bf16).
    bool hf_rounding = false;
    // Reference path only (GDN_FORCE_REFERENCE): AUTO/CHUNKED use the chunked form for sequences of
    // >= 64 tokens, RECURRENT always the token-by-token form. The fast kernel is always recurrent.
    GdnForm gdn_form = GdnForm::AUTO;
};

// One sequence's slice of a batch: its tokens continue the sequence held in `state`.
struct SequenceInput {
    SequenceState* state = nullptr;
    const int32_t* tokens = nullptr;
    int64_t n_tokens = 0;
    bool all_logits = false;  // logits for every token, else only for the last one
};

class Model {
  public:
    // Loads the checkpoint folder dir, or a GGUF file (the first part of a split one:
    // model/gguf_checkpoint.h). The model runs every forward on ctx (its pool packs the weights too); a model
    // for another rank, device or pool is another Model loaded on that context.
    static Result<std::unique_ptr<Model>> load(const ExecContext& ctx, const std::string& dir,
                                               const LoadProgress& progress = nullptr,
                                               const LoadOptions& options = {});

    const ModelConfig& config() const { return config_; }
    const ExecContext& context() const { return ctx_; }
    const ModelWeights& weights() const { return *weights_; }

    // Runs the batch, advancing every sequence's state, with the first sequence's workspace. Appends the
    // requested logits rows to `logits`
    // ([rows, V], in sequence order). Token ids must be in [0, V) (checked: error, state untouched).
    // With greedy_ids, the argmax of each of those rows is appended to *greedy_ids instead (the lm_head
    // computes it directly; the [rows, V] logits are never written and *logits is left alone).
    // With hidden, the final-norm output of every token of the batch is appended to it ([N, H], batch
    // order): the MTP layer's h_t.
    Status forward(const std::vector<SequenceInput>& batch, const ForwardOptions& opt,
                   std::vector<float>* logits, std::vector<int32_t>* greedy_ids = nullptr,
                   std::vector<float>* hidden = nullptr) const;
    // The same with a workspace of the caller's (a benchmark reuses one warm workspace across fresh states:
    // the first forward on a new workspace touches its buffers).
    Status forward(ForwardWorkspace& ws, const std::vector<SequenceInput>& batch, const ForwardOptions& opt,
                   std::vector<float>* logits, std::vector<int32_t>* greedy_ids = nullptr,
                   std::vector<float>* hidden = nullptr) const;

    // The engine's forward: a host-built plan over the paged KV cache and the GDN state slots. Appends
    // the logits of plan.logits_rows. Token ids are validated; everything else is trusted (built by the
    // engine). Reads nothing back from the compute device.
    // With greedy_ids, the lm_head returns the argmax of each logits row instead (appended to *greedy_ids;
    // nothing is appended to *logits): the vocabulary-sized rows are never materialised.
    // plan.gdn_out_slot sends sequences' per-token GDN states to other slots; plan.gdn_verify (speculative
    // verification) leaves sequences' GDN states unchanged and stages their rows for commit_verified.
    Status forward(ForwardWorkspace& ws, const BatchPlan& plan, KvCache& kv, StateSlots& slots,
                   const ForwardOptions& opt, std::vector<float>* logits,
                   std::vector<int32_t>* greedy_ids = nullptr, std::vector<float>* hidden = nullptr) const;
    // After a forward that verified sequences (plan.gdn_verify): each commit takes the first n_tokens
    // tokens of plan sequence `seq` into the GDN state, reading from_slot (the state the verify read) and
    // leaving the state after them in to_slot (from_slot itself: in place). The tokens are rerun from the
    // staged rows with the decode step's kernels, so the state is bitwise the one plain decoding leaves.
    // Call it before the next forward (which overwrites the staging rows), with the same options.
    struct GdnCommit {
        int32_t seq;
        int32_t from_slot, to_slot;
        int64_t n_tokens;
    };
    Status commit_verified(ForwardWorkspace& ws, const std::vector<GdnCommit>& commits, StateSlots& slots,
                           const ForwardOptions& opt) const;

    // The MTP draft layer (model_spec.md §4.8; loaded with LoadOptions::mtp). Row i of the plan is slot t =
    // plan.positions[i]: plan.token_ids[i] is token t+1 and hidden row i ([N, H]) the main model's h_t (or,
    // for a recursive draft, this layer's own output at the slot before). The layer's K/V rows go to the
    // KV cache's last layer (KvCache built with n_attention_layers() + 1 layers) at plan.slot_mapping.
    // Appends the logits (or greedy ids) of plan.logits_rows, which predict token t+2, and, with
    // hidden_out, its output after mtp.norm for those rows ([R, H] in their order: the next recursive
    // step's input). Past the layer's attention only those rows are computed.
    Status mtp_forward(ForwardWorkspace& ws, const BatchPlan& plan, const float* hidden, KvCache& kv,
                       const ForwardOptions& opt, std::vector<float>* logits,
                       std::vector<int32_t>* greedy_ids = nullptr,
                       std::vector<float>* hidden_out = nullptr) const;
    // The same over a standalone sequence (its mtp_past slots are in its MTP KV cache): n slots from
    // mtp_past on; logits (and hidden_out) for every row ([n, V]).
    Status mtp_forward(SequenceState& state, const int32_t* next_tokens, const float* hidden, int64_t n,
                       const ForwardOptions& opt, std::vector<float>* logits,
                       std::vector<float>* hidden_out = nullptr) const;
    bool has_mtp() const { return weights_->mtp != nullptr; }

    // kv_dtype BF16: a KV cache of half the size, for forwards with bf16 activations (checked).
    SequenceState new_state(DType kv_dtype = DType::F32) const {
        return SequenceState(config_, kv_dtype, has_mtp());
    }
    ~Model();

  private:
    explicit Model(const ExecContext& ctx);
    void run(ForwardWorkspace& ws, const int32_t* ids, const int64_t* pos,
             const std::vector<int64_t>& logit_rows, CacheAccess& cache, const ForwardOptions& opt,
             std::vector<float>* logits, std::vector<int32_t>* greedy_ids, std::vector<float>* hidden) const;
    void run_mtp(ForwardWorkspace& ws, const int32_t* ids, const int64_t* pos, const float* hidden,
                 const std::vector<int64_t>& logit_rows, CacheAccess& cache, const ForwardOptions& opt,
                 std::vector<float>* logits, std::vector<int32_t>* greedy_ids,
                 std::vector<float>* hidden_out) const;
    // The lm_head over the rows `rows` of h [*, H]: logits or greedy ids appended.
    void head(ForwardWorkspace& ws, const float* h, const std::vector<int64_t>& rows,
              const ForwardOptions& opt, std::vector<float>* logits, std::vector<int32_t>* greedy_ids,
              const LinearWeight* argmax_head = nullptr) const;
    ExecContext ctx_;
    ModelConfig config_;
    std::unique_ptr<ModelWeights> weights_;
};

}  // namespace gdn
