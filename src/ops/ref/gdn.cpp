// Gated delta rule, recurrent and chunked forms, written with the state S [Dk, Dv] per value head exactly
// as in model_spec.md §4.5. The engine stores S in this layout ([Hv, Dk, Dv], values contiguous): on a
// CPU whose SIMD lanes run along the value dimension, both the decode step and the prefill recurrence
// then need no horizontal reductions.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/ref/ref_ops.h"

namespace gdn::ref {

void gated_delta_rule_recurrent(const float* q, const float* k, const float* v, const float* g,
                                const float* beta, int64_t T, int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv,
                                float* state, float* out, bool v_tiled) {
    const int64_t r = Hv / Hk;
    std::vector<float> kv(Dv), dlt(Dv);
    for (int64_t h = 0; h < Hv; ++h) {
        const int64_t hk = v_tiled ? h % Hk : h / r;  // tiled, or repeat_interleave (HF)
        float* S = state + h * Dk * Dv;               // [Dk, Dv]
        for (int64_t t = 0; t < T; ++t) {
            const float* qt = q + (t * Hk + hk) * Dk;
            const float* kt = k + (t * Hk + hk) * Dk;
            const float* vt = v + (t * Hv + h) * Dv;
            const float decay = std::exp(g[t * Hv + h]);
            const float bt = beta[t * Hv + h];
            for (int64_t i = 0; i < Dk * Dv; ++i) S[i] *= decay;  // S = exp(g) S
            for (int64_t j = 0; j < Dv; ++j) {
                float s = 0.0f;
                for (int64_t i = 0; i < Dk; ++i) s += S[i * Dv + j] * kt[i];  // kv = S^T k
                kv[j] = s;
                dlt[j] = bt * (vt[j] - kv[j]);  // delta = beta (v - kv)
            }
            for (int64_t i = 0; i < Dk; ++i)
                for (int64_t j = 0; j < Dv; ++j) S[i * Dv + j] += kt[i] * dlt[j];  // S += k ⊗ delta
            float* ot = out + (t * Hv + h) * Dv;
            for (int64_t j = 0; j < Dv; ++j) {
                float o = 0.0f;
                for (int64_t i = 0; i < Dk; ++i) o += S[i * Dv + j] * qt[i];  // o = S^T q (updated state)
                ot[j] = o;
            }
        }
    }
}

void gated_delta_rule_chunked(const float* q, const float* k, const float* v, const float* g,
                              const float* beta, int64_t T, int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv,
                              float* state, float* out, bool v_tiled) {
    constexpr int64_t C = 64;
    const int64_t r = Hv / Hk;
    std::vector<float> Q(C * Dk), K(C * Dk), V(C * Dv);  // chunk rows, zero-padded
    std::vector<float> G(C), Bt(C);
    std::vector<float> Dec(C * C), A(C * C), L(C * C);  // [C, C]
    std::vector<float> U(C * Dv), W(C * Dk), Unew(C * Dv), O(C * Dv);
    for (int64_t h = 0; h < Hv; ++h) {
        const int64_t hk = v_tiled ? h % Hk : h / r;
        float* S = state + h * Dk * Dv;  // [Dk, Dv]
        for (int64_t c0 = 0; c0 < T; c0 += C) {
            const int64_t n = std::min(C, T - c0);  // valid rows; the rest are zero padding (g = beta = 0)
            for (int64_t t = 0; t < C; ++t) {
                const bool valid = t < n;
                const int64_t tt = c0 + t;
                for (int64_t i = 0; i < Dk; ++i) {
                    Q[t * Dk + i] = valid ? q[(tt * Hk + hk) * Dk + i] : 0.0f;
                    K[t * Dk + i] = valid ? k[(tt * Hk + hk) * Dk + i] : 0.0f;
                }
                for (int64_t j = 0; j < Dv; ++j) V[t * Dv + j] = valid ? v[(tt * Hv + h) * Dv + j] : 0.0f;
                const float gt = valid ? g[tt * Hv + h] : 0.0f;
                Bt[t] = valid ? beta[tt * Hv + h] : 0.0f;
                G[t] = (t ? G[t - 1] : 0.0f) + gt;  // chunk-local cumulative log-decay
            }
            // Decay matrix: masked BEFORE exp so the upper triangle never overflows.
            for (int64_t i = 0; i < C; ++i)
                for (int64_t j = 0; j < C; ++j) Dec[i * C + j] = i >= j ? std::exp(G[i] - G[j]) : 0.0f;
            // L = -B (strictly lower), B_ij = beta_i (k_i . k_j) Dec_ij
            for (int64_t i = 0; i < C; ++i)
                for (int64_t j = 0; j < C; ++j) {
                    float kk = 0.0f;
                    if (i > j)
                        for (int64_t d = 0; d < Dk; ++d) kk += K[i * Dk + d] * K[j * Dk + d];
                    L[i * C + j] = i > j ? -Bt[i] * kk * Dec[i * C + j] : 0.0f;
                }
            // Forward substitution: L[i, :i] += L[i, :i] @ L[:i, :i], then Tm = L + I.
            for (int64_t i = 1; i < C; ++i) {
                std::vector<float> row(L.begin() + i * C, L.begin() + i * C + i);
                for (int64_t j = 0; j < i; ++j) {
                    float s = 0.0f;
                    for (int64_t m = j + 1; m < i; ++m) s += row[m] * L[m * C + j];
                    L[i * C + j] = row[j] + s;
                }
            }
            for (int64_t i = 0; i < C; ++i) L[i * C + i] = 1.0f;  // Tm
            // U = Tm (beta ⊙ V), W = Tm (beta ⊙ exp(G) ⊙ K)
            for (int64_t i = 0; i < C; ++i) {
                for (int64_t j = 0; j < Dv; ++j) {
                    float s = 0.0f;
                    for (int64_t m = 0; m <= i; ++m) s += L[i * C + m] * Bt[m] * V[m * Dv + j];
                    U[i * Dv + j] = s;
                }
                for (int64_t d = 0; d < Dk; ++d) {
                    float s = 0.0f;
                    for (int64_t m = 0; m <= i; ++m)
                        s += L[i * C + m] * Bt[m] * std::exp(G[m]) * K[m * Dk + d];
                    W[i * Dk + d] = s;
                }
            }
            // Unew = U - W S
            for (int64_t i = 0; i < C; ++i)
                for (int64_t j = 0; j < Dv; ++j) {
                    float s = 0.0f;
                    for (int64_t d = 0; d < Dk; ++d) s += W[i * Dk + d] * S[d * Dv + j];
                    Unew[i * Dv + j] = U[i * Dv + j] - s;
                }
            // A_ij = (q_i . k_j) Dec_ij for i >= j;  O = (exp(G) ⊙ Q) S + A Unew
            for (int64_t i = 0; i < C; ++i)
                for (int64_t j = 0; j <= i; ++j) {
                    float s = 0.0f;
                    for (int64_t d = 0; d < Dk; ++d) s += Q[i * Dk + d] * K[j * Dk + d];
                    A[i * C + j] = s * Dec[i * C + j];
                }
            for (int64_t i = 0; i < n; ++i) {
                const float eg = std::exp(G[i]);
                for (int64_t j = 0; j < Dv; ++j) {
                    float s = 0.0f;
                    for (int64_t d = 0; d < Dk; ++d) s += Q[i * Dk + d] * S[d * Dv + j];
                    s *= eg;
                    for (int64_t m = 0; m <= i; ++m) s += A[i * C + m] * Unew[m * Dv + j];
                    out[((c0 + i) * Hv + h) * Dv + j] = s;
                }
            }
            // S = exp(G_last) S + (exp(G_last - G) ⊙ K)^T Unew   (G_last = G[C-1] = G[n-1]: padding adds 0)
            const float g_last = G[C - 1];
            const float e_last = std::exp(g_last);
            for (int64_t d = 0; d < Dk; ++d)
                for (int64_t j = 0; j < Dv; ++j) {
                    float s = 0.0f;
                    for (int64_t m = 0; m < C; ++m)
                        s += std::exp(g_last - G[m]) * K[m * Dk + d] * Unew[m * Dv + j];
                    S[d * Dv + j] = e_last * S[d * Dv + j] + s;
                }
        }
    }
}

}  // namespace gdn::ref
