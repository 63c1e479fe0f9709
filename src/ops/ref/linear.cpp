#include <vector>

#include "core/thread_pool.h"
#include "ops/quant/ggml_repack.h"
#include "ops/ref/ref_ops.h"

namespace gdn::ref {

void embedding(const TensorView& table, const int32_t* ids, int64_t n, float* out) {
    const int64_t V = table.shape[0], H = table.shape[1];
    for (int64_t i = 0; i < n; ++i) {
        GDN_CHECK(ids[i] >= 0 && ids[i] < V, "token id %d out of range [0, %lld)", ids[i], (long long)V);
        row_to_f32(table, ids[i], out + i * H);  // a GGUF table's ggml rows dequantized
    }
}

void linear(const ExecContext& ctx, const float* x, int64_t M, const TensorView& W, float* y) {
    const int64_t N = W.shape[0], K = W.shape[1];
    GDN_CHECK(W.rank == 2 && W.stride[1] == 1);
    // Output columns are split over threads; each y[m, n] is computed by exactly one thread in a fixed
    // order, so the result does not depend on the thread count.
    ctx.pool().parallel_for(N, [&](int64_t n0, int64_t n1) {
        std::vector<float> wrow(K);
        for (int64_t n = n0; n < n1; ++n) {
            convert_to_f32(W.dtype, W.row(n), wrow.data(), K);
            for (int64_t m = 0; m < M; ++m) {
                const float* xr = x + m * K;
                float acc = 0.0f;
                for (int64_t kk = 0; kk < K; ++kk) acc += xr[kk] * wrow[kk];
                y[m * N + n] = acc;
            }
        }
    });
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out, bool bf16) {
    for (int64_t i = 0; i < n; ++i) {
        float s = silu(gate[i]);
        if (bf16) s = round_bf16(s);
        out[i] = s * up[i];
    }
}

int64_t argmax(const float* x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i)
        if (x[i] > x[best]) best = i;
    return best;
}

}  // namespace gdn::ref
