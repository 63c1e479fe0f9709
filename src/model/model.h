// Model: config + weights + the forward pass over a batch of sequences (prefill and decode alike).
// One forward serves all three families: after the load-time transforms in weights.cpp, Qwen3-Next
// and Qwen3.5 differ only in which layers are MoE and whether top-k weights are renormalised.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/batch_plan.h"
#include "model/config.h"
#include "model/state.h"
#include "model/weights.h"

namespace gdn {

enum class GdnForm { AUTO, RECURRENT, CHUNKED };  // selects the form of the REFERENCE delta rule

struct ForwardWorkspace;
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
    static Result<std::unique_ptr<Model>> load(const std::string& dir, const LoadProgress& progress = nullptr,
                                               const LoadOptions& options = {});

    const ModelConfig& config() const { return config_; }
    const ModelWeights& weights() const { return *weights_; }

    // Runs the batch, advancing every sequence's state. Appends the requested logits rows to `logits`
    // ([rows, V], in sequence order). Token ids must be in [0, V) (checked: error, state untouched).
    // With greedy_ids, the argmax of each of those rows is appended to *greedy_ids instead (the lm_head
    // computes it directly; the [rows, V] logits are never written and *logits is left alone).
    Status forward(const std::vector<SequenceInput>& batch, const ForwardOptions& opt, std::vector<float>* logits,
                   std::vector<int32_t>* greedy_ids = nullptr) const;

    // The engine's forward: a host-built plan over the paged KV cache and the GDN state slots. Appends
    // the logits of plan.logits_rows. Token ids are validated; everything else is trusted (built by the
    // engine). Reads nothing back from the compute device.
    // With greedy_ids, the lm_head returns the argmax of each logits row instead (appended to *greedy_ids;
    // nothing is appended to *logits): the vocabulary-sized rows are never materialised.
    Status forward(const BatchPlan& plan, KvCache& kv, StateSlots& slots, const ForwardOptions& opt,
                   std::vector<float>* logits, std::vector<int32_t>* greedy_ids = nullptr) const;

    // kv_dtype BF16: a KV cache of half the size, for forwards with bf16 activations (checked).
    SequenceState new_state(DType kv_dtype = DType::F32) const { return SequenceState(config_, kv_dtype); }
    ~Model();

private:
    Model() = default;
    void run(const int32_t* ids, const int64_t* pos, const std::vector<int64_t>& logit_rows, CacheAccess& cache,
             const ForwardOptions& opt, std::vector<float>* logits, std::vector<int32_t>* greedy_ids) const;
    ModelConfig config_;
    std::unique_ptr<ModelWeights> weights_;
    // Buffers reused across forward calls. One forward at a time per Model (the engine thread).
    std::unique_ptr<ForwardWorkspace> ws_;
};

}  // namespace gdn
