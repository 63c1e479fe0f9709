// The statistics of `gdn perplexity` (llama-perplexity's semantics) and its KL-divergence base file.
//
// Windows: the token stream is cut into non-overlapping windows of ctx tokens (a tail shorter than
// ctx is dropped); in each, the logits at positions [ctx/2, ctx-1) are scored against the next
// token, so every scored token has at least ctx/2 tokens of context.
//
// Base file (--kl-divergence-base writes it, --kl-divergence reads it), little-endian:
//   "GDNKLD01" | u32 vocab | u32 ctx | u64 n_tokens | i32 tokens[n_tokens] | f32 log_probs[scored][vocab]
// one row of full-vocabulary log-probabilities per scored token, in scoring order (f32, so the base's
// own rounding stays far below the KL divergences it measures).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace gdn::perplexity {

// log-softmax of one logits row in double, stored as f32; returns the argmax (first on ties).
int64_t log_softmax(const float* logits, int64_t V, float* out);

// KL(P || Q) = sum_v p_v (log p_v - log q_v) for log-probability rows.
double kl_divergence(const float* logp, const float* logq, int64_t V);

struct Summary {
    int64_t n = 0;
    double ppl = 0, ppl_err = 0;  // exp(mean NLL), and its standard error (delta method)
    double base_ppl = 0;          // with a base: the base model's PPL on the same tokens
    double kld_mean = 0, kld_err = 0, kld_p99 = 0;
    double same_top = 0, same_top_err = 0;  // fraction of tokens whose argmax equals the base's
    bool has_base = false;
};

class Accumulator {
  public:
    void add(double nll) { nll_.push_back(nll); }
    void add_base(double base_nll, double kld, bool same_top) {
        base_nll_.push_back(base_nll);
        kld_.push_back(kld);
        same_ += same_top;
    }
    Summary summary() const;

  private:
    std::vector<double> nll_, base_nll_, kld_;
    int64_t same_ = 0;
};

class BaseWriter {
  public:
    static Result<std::unique_ptr<BaseWriter>> create(const std::string& path, uint32_t vocab, uint32_t ctx,
                                                      const std::vector<int32_t>& tokens);
    Status write_row(const float* logp);
    Status close();
    ~BaseWriter();

  private:
    std::string path_;
    FILE* f_ = nullptr;
    uint32_t vocab_ = 0;
};

class BaseReader {
  public:
    // Checks the header against this run: same vocabulary, ctx and token stream, and a size that holds
    // exactly `scored` rows. Every mismatch is an error naming it.
    static Result<std::unique_ptr<BaseReader>> open(const std::string& path, uint32_t vocab, uint32_t ctx,
                                                    const std::vector<int32_t>& tokens, int64_t scored);
    Status read_row(float* logp);
    ~BaseReader();

  private:
    std::string path_;
    FILE* f_ = nullptr;
    uint32_t vocab_ = 0;
};

}  // namespace gdn::perplexity
