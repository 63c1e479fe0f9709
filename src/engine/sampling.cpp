#include "engine/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/log.h"
#include "ops/layers.h"

namespace gdn {

int32_t Sampler::sample(float* logits, int32_t V, const SamplingParams& p, SamplerState& st,
                        const std::vector<int32_t>& prompt, const std::vector<int32_t>& output,
                        const std::vector<int32_t>& eos, std::vector<TokenLogprob>* lp) {
    prepare(logits, V, p, st, prompt, output, eos);
    const int32_t chosen = draw(st);
    if (lp && p.logprobs >= 0) logprobs(chosen, lp);
    return chosen;
}

void Sampler::prepare(float* logits, int32_t V, const SamplingParams& p, SamplerState& st,
                      const std::vector<int32_t>& prompt, const std::vector<int32_t>& output,
                      const std::vector<int32_t>& eos) {
    logits_ = logits;
    V_ = V;
    logprobs_n_ = p.logprobs;
    for (const auto& [t, bias] : p.logit_bias) logits[t] += bias;  // OpenAI: before everything else
    // Penalties (vLLM semantics): repetition on prompt + output tokens, presence / frequency on output.
    if (p.repetition_penalty != 1.0f) {
        if (seen_.size() < static_cast<size_t>(V)) seen_.assign(V, 0);
        auto apply = [&](int32_t t) {
            if (seen_[t]) return;
            seen_[t] = 1;
            logits[t] = logits[t] > 0 ? logits[t] / p.repetition_penalty : logits[t] * p.repetition_penalty;
        };
        for (int32_t t : prompt) apply(t);
        for (int32_t t : output) apply(t);
        for (int32_t t : prompt) seen_[t] = 0;
        for (int32_t t : output) seen_[t] = 0;
    }
    if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
        if (st.out_counts.size() != static_cast<size_t>(V))
            st.out_counts.assign(V, 0);  // kept all-zero between calls
        for (int32_t t : output) st.out_counts[t]++;
        for (int32_t t : output) {
            const int32_t c = st.out_counts[t];
            if (c == 0) continue;
            logits[t] -= p.frequency_penalty * c + p.presence_penalty;
            st.out_counts[t] = 0;  // apply once per distinct token
        }
    }
    if (static_cast<int>(output.size()) < p.min_tokens)
        for (int32_t t : eos) logits[t] = -INFINITY;

    greedy_id_ = -1;
    if (p.greedy()) {
        greedy_id_ =
            static_cast<int32_t>(ops::argmax(ctx_, logits, V));  // no softmax, no copy of the vocabulary
    } else {
        // temperature -> top-k -> top-p -> min-p, then one draw from the request's RNG. Candidates are
        // sorted only as far as the filters need (a partial sort that widens), never the whole vocabulary
        // unless a filter demands it.
        const float inv_t = 1.0f / p.temperature;
        float mx = -INFINITY;
        for (int32_t i = 0; i < V; ++i) mx = std::max(mx, logits[i]);
        probs_.resize(V);
        double sum = 0;
        for (int32_t i = 0; i < V; ++i) sum += (probs_[i] = std::exp((logits[i] - mx) * inv_t));
        const auto by_prob = [&](int32_t a, int32_t b) {
            return probs_[a] > probs_[b] || (probs_[a] == probs_[b] && a < b);
        };
        idx_.resize(V);
        std::iota(idx_.begin(), idx_.end(), 0);
        int32_t n = V;  // candidates idx_[0, n) (sorted by probability when filtered)
        bool sorted = false;
        if (p.top_k > 0 && p.top_k < V) {
            std::partial_sort(idx_.begin(), idx_.begin() + p.top_k, idx_.end(), by_prob);
            n = p.top_k;
            sorted = true;
            sum = 0;
            for (int32_t i = 0; i < n; ++i) sum += probs_[idx_[i]];
        }
        if (p.top_p < 1.0f || p.min_p > 0.0f) {
            const double pmax = sorted ? probs_[idx_[0]] : std::exp(0.0);  // the max has exp(0) = 1
            int32_t k = sorted ? n : std::min<int32_t>(64, V);
            for (;;) {
                if (!sorted) std::partial_sort(idx_.begin(), idx_.begin() + k, idx_.begin() + n, by_prob);
                double c = 0;
                int32_t keep_p = -1, keep_m = -1;
                for (int32_t i = 0; i < k; ++i) {
                    c += probs_[idx_[i]];
                    if (keep_p < 0 && c >= p.top_p * sum) keep_p = i + 1;
                    if (keep_m < 0 && probs_[idx_[i]] < p.min_p * pmax) keep_m = i;
                }
                const bool p_done = p.top_p >= 1.0f || keep_p >= 0;
                const bool m_done = p.min_p <= 0.0f || keep_m >= 0;
                if ((p_done && m_done) || k == n) {
                    int32_t keep = n;
                    if (p.top_p < 1.0f) keep = std::min(keep, keep_p >= 0 ? keep_p : k);
                    if (p.min_p > 0.0f) keep = std::min(keep, keep_m >= 0 ? std::max(keep_m, 1) : k);
                    n = keep;
                    break;
                }
                k = std::min<int32_t>(n, k * 4);
            }
        }
        double total = 0;
        for (int32_t i = 0; i < n; ++i) total += probs_[idx_[i]];
        n_ = n;
        total_ = total;
    }
}

double Sampler::prob(int32_t t) const {
    if (greedy_id_ >= 0) return t == greedy_id_ ? 1.0 : 0.0;
    if (t < 0 || t >= V_ || total_ <= 0) return 0.0;
    if (n_ < V_) {  // filtered: t must be a candidate
        bool in = false;
        for (int32_t i = 0; i < n_ && !in; ++i) in = idx_[i] == t;
        if (!in) return 0.0;
    }
    return probs_[t] / total_;
}

int32_t Sampler::draw(SamplerState& st, int32_t exclude) {
    if (greedy_id_ >= 0) return greedy_id_;
    double total = total_;
    if (exclude >= 0) total -= prob(exclude) * total_;
    if (!(total > 0)) return exclude;  // the excluded token held all the mass (cannot be rejected)
    const double u = std::uniform_real_distribution<double>(0.0, total)(st.rng);
    double c = 0;
    int32_t chosen = -1;
    for (int32_t i = 0; i < n_; ++i) {
        if (idx_[i] == exclude) continue;
        c += probs_[idx_[i]];
        chosen = idx_[i];
        if (u < c) break;
    }
    return chosen;
}

void token_logprobs(const float* logits, int32_t V, int32_t chosen, int n, std::vector<TokenLogprob>* lp,
                    std::vector<int32_t>* order) {
    float mx = -INFINITY;
    for (int32_t i = 0; i < V; ++i) mx = std::max(mx, logits[i]);
    double s = 0;
    for (int32_t i = 0; i < V; ++i) s += std::exp(static_cast<double>(logits[i] - mx));
    const double lse = std::log(s);
    auto log_softmax_of = [&](int32_t t) { return static_cast<float>(logits[t] - mx - lse); };
    lp->clear();
    lp->push_back({chosen, log_softmax_of(chosen)});
    if (n > 0) {
        order->resize(V);
        std::iota(order->begin(), order->end(), 0);
        const int32_t k = std::min(n, V);
        std::partial_sort(order->begin(), order->begin() + k, order->end(), [&](int32_t a, int32_t b) {
            return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
        });
        for (int32_t i = 0; i < k; ++i) lp->push_back({(*order)[i], log_softmax_of((*order)[i])});
    }
}

void Sampler::logprobs(int32_t chosen, std::vector<TokenLogprob>* lp) {
    // Log-probabilities of the (penalised) model distribution at temperature 1; sorts its own index
    // list (idx_ holds the prepared distribution).
    token_logprobs(logits_, V_, chosen, logprobs_n_, lp, &order_);
}

}  // namespace gdn
