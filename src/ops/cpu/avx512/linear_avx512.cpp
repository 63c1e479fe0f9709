// AVX-512 linear kernels: the generic f32 kernel, and the bf16 dot-product kernel (vdpbf16ps) that
// carries decode (GEMV, bandwidth bound) and prefill (GEMM, compute bound).
#define GDN_SIMD_AVX512
#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "ops/cpu/linear_kernels.h"
#include "ops/cpu/row_slabs.h"
#include "ops/cpu/simd.h"
#include "ops/cpu/stream_ahead.h"

namespace gdn::cpu::avx512 {

#include "ops/cpu/linear_f32.inc"

namespace {

constexpr int kMRdot = 12;  // 12 rows x 2 vectors = 24 accumulators
constexpr int64_t kKcPairs =
    2048;  // k-pairs per block: a weight panel block streams from L2 (measured: C reloads cost more)

// The lines of the next weight panel that one prefill tile asks for while it computes (PanelAhead below):
// `lines` cache lines from `p`, one every `every` k-pairs.
struct LinesAhead {
    const char* p = nullptr;
    int64_t lines = 0, every = 1;
};

// kSwiglu: the panel holds 16 gate columns then the 16 matching up columns; the tile stores
// silu(gate) * up (16 columns) instead of the 32 products. kStream: the tile is the only one of its panel
// (a decode batch), which streams from memory: 2+ rows ask for its lines ahead (ops/cpu/stream_ahead.h).
// ahead: a prefill tile's share of the next panel's lines (nothing for decode batches).
template <int MR, bool kSwiglu = false, bool kStream = false>
void tile_dot(const uint32_t* xp, int64_t ldp, const uint16_t* B, int64_t kk0, int64_t kk1, float* y,
              int64_t ldy, int ncols, bool accumulate, bool round_out, LinesAhead ahead = {}) {
    __m512 acc[MR][2];
    const __mmask16 m0 = simd::lanes_mask(ncols), m1 = simd::lanes_mask(ncols - 16);
    for (int m = 0; m < MR; ++m) {
        acc[m][0] = accumulate ? _mm512_maskz_loadu_ps(m0, y + m * ldy) : _mm512_setzero_ps();
        acc[m][1] = accumulate ? _mm512_maskz_loadu_ps(m1, y + m * ldy + 16) : _mm512_setzero_ps();
    }
    const uint16_t* b = B + kk0 * 2 * kPanelCols;
    // Runs of `every` k-pairs, each after one line of `ahead` is asked for (one run of all of them when
    // there is nothing to ask for): the inner loop stays free of tests.
    const int64_t run = ahead.lines > 0 ? ahead.every : kk1 - kk0;
    for (int64_t kk = kk0; kk < kk1;) {
        if (ahead.lines > 0) {
            _mm_prefetch(ahead.p, _MM_HINT_T1);  // into L2, where the next tiles read it
            ahead.p += 64;
            --ahead.lines;
        }
        for (const int64_t end = std::min(kk1, kk + run); kk < end; ++kk, b += 2 * kPanelCols) {
            if constexpr (kStream && MR >= 2) stream_ahead_batch_128(b);
            const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b);
            const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + 32);
            for (int m = 0; m < MR; ++m) {
                const __m512bh a = (__m512bh)_mm512_set1_epi32(static_cast<int>(xp[m * ldp + kk]));
                acc[m][0] = _mm512_dpbf16_ps(acc[m][0], a, b0);
                acc[m][1] = _mm512_dpbf16_ps(acc[m][1], a, b1);
            }
        }
    }
    if constexpr (kSwiglu) {
        for (int m = 0; m < MR; ++m)
            _mm512_storeu_ps(y + m * ldy, _mm512_mul_ps(simd::vsilu(acc[m][0]), acc[m][1]));
        return;
    }
    for (int m = 0; m < MR; ++m) {
        _mm512_mask_storeu_ps(y + m * ldy, m0, round_out ? simd::vround_bf16(acc[m][0]) : acc[m][0]);
        _mm512_mask_storeu_ps(y + m * ldy + 16, m1, round_out ? simd::vround_bf16(acc[m][1]) : acc[m][1]);
    }
}

template <int MR, bool kStream = false>
void tile_dot_dispatch(int mr, const uint32_t* xp, int64_t ldp, const uint16_t* B, int64_t kk0, int64_t kk1,
                       float* y, int64_t ldy, int ncols, bool acc, bool round_out, LinesAhead ahead = {}) {
    if constexpr (MR > 0) {
        if (mr == MR)
            return tile_dot<MR, false, kStream>(xp, ldp, B, kk0, kk1, y, ldy, ncols, acc, round_out, ahead);
        return tile_dot_dispatch<MR - 1, kStream>(mr, xp, ldp, B, kk0, kk1, y, ldy, ncols, acc, round_out,
                                                  ahead);
    }
}

template <int MR, bool kStream = false>
void tile_swiglu_dispatch(int mr, const uint32_t* xp, int64_t ldp, const uint16_t* B, int64_t K2, float* y,
                          int64_t ldy, LinesAhead ahead = {}) {
    if constexpr (MR > 0) {
        if (mr == MR) return tile_dot<MR, true, kStream>(xp, ldp, B, 0, K2, y, ldy, 32, false, false, ahead);
        return tile_swiglu_dispatch<MR - 1, kStream>(mr, xp, ldp, B, K2, y, ldy, ahead);
    }
}

// A prefill product meets each panel's k block first in its first slab's first row tile, which waits
// on memory for it (the later tiles read it from L2): for a prompt of a hundred-odd rows that first
// read is ~10% of the panel's time. So in the first slab the row tiles of panel p share out the lines
// of panel p + 1's same k block, each asking for its part into L2 spread over its k loop. Panel p + 1
// is the thread's next one unless its claim ends at p (then usually its next claim's first; at the end
// of its share, one the other thread has read: a wasted block). Later slabs meet panels the thread
// read a slab ago, and asking there measured slower (L2 holds the slab's rows, this panel and the
// next). Bitwise the same products. Zen 5, 2 threads, weights streamed from memory (docs/perf.md,
// twenty-ninth session): K = 1024 products at M = 128-256 0.83-0.93 of the time, M = 1056 0.93-0.99;
// N = 1024, K = 2048 / 3584 at M = 135 0.95-0.97, at M = 288-4096 0.99-1.05.
class PanelAhead {
  public:
    // For the row tiles of rows [s0, s1) on panel p's k-pairs [kk0, kk1).
    PanelAhead(const PackedWeight& w, int64_t p, int64_t kk0, int64_t kk1, int64_t s0, int64_t s1)
        : p_(reinterpret_cast<const char*>(w.bf16_panel(std::min(p + 1, w.n_panels - 1)) +
                                           kk0 * 2 * kPanelCols)),
          lines_(s0 == 0 && p + 1 < w.n_panels ? (kk1 - kk0) * 2 * kPanelCols * 2 / 64 : 0),
          per_tile_((lines_ + tiles(s0, s1) - 1) / tiles(s0, s1)),
          every_(std::max<int64_t>(1, (kk1 - kk0) / std::max<int64_t>(per_tile_, 1))) {}
    // The next tile's share (nothing once every line has been asked for).
    LinesAhead take() {
        LinesAhead a{p_ + done_ * 64, std::min(per_tile_, lines_ - done_), every_};  // done_ <= lines_
        done_ += a.lines;
        return a;
    }

  private:
    static int64_t tiles(int64_t s0, int64_t s1) { return (s1 - s0 + kMRdot - 1) / kMRdot; }
    const char* p_;
    int64_t lines_, per_tile_, every_, done_ = 0;
};

// The AMX form of the three entry points below, for every M (decode too: a row's sums must not depend on
// the batch it is in). Rows go in blocks of up to 32 through amx_panel_block over the k-pairs [0, kk_end),
// kk_end the largest multiple of 16; the remaining k-pairs, in order, and the epilogue run on vdpbf16ps:
// finish(m, p, v0, v1) gets row m's 32 sums of panel p (columns 0-15, 16-31).
template <class Finish>
void amx_panels(const uint32_t* xp, int64_t M, int64_t ldp, const PackedWeight& w, int64_t p0, int64_t p1,
                Finish finish) {
    const int64_t kk_end = w.K2 / 16 * 16;
    // Rows in L2-sized slabs (ops/cpu/row_slabs.h; M = 4096: 1.8 GB of L3 reads per GEMM otherwise), of
    // whole 32-row blocks and at most 1024 rows.
    const int64_t slab = std::min<int64_t>(1024, slab_rows(w.K2 * 4, 32));
    alignas(64) float c[32 * 32];
    for (int64_t s0 = 0; s0 < M; s0 += slab) {
        for (int64_t p = p0; p < p1; ++p) {
            const uint16_t* B = w.bf16_panel(p);
            for (int64_t m0 = s0; m0 < std::min(M, s0 + slab); m0 += 32) {
                const int mr = static_cast<int>(std::min<int64_t>(32, M - m0));
                if (kk_end > 0) amx_panel_block(xp + m0 * ldp, ldp, mr, B, kk_end, c, m0 == s0);
                for (int r = 0; r < mr; ++r) {
                    __m512 v0 = kk_end > 0 ? _mm512_load_ps(c + r * 32) : _mm512_setzero_ps();
                    __m512 v1 = kk_end > 0 ? _mm512_load_ps(c + r * 32 + 16) : _mm512_setzero_ps();
                    const uint32_t* xr = xp + (m0 + r) * ldp;
                    for (int64_t kk = kk_end; kk < w.K2; ++kk) {
                        const __m512bh a = (__m512bh)_mm512_set1_epi32(static_cast<int>(xr[kk]));
                        v0 = _mm512_dpbf16_ps(v0, a, (__m512bh)_mm512_loadu_si512(B + kk * 2 * kPanelCols));
                        v1 = _mm512_dpbf16_ps(v1, a,
                                              (__m512bh)_mm512_loadu_si512(B + kk * 2 * kPanelCols + 32));
                    }
                    finish(m0 + r, p, v0, v1);
                }
            }
        }
    }
    amx_end();
}

}  // namespace

void linear_bf16dot_swiglu_amx(const uint32_t* xp, int64_t M, int64_t ldp, const PackedWeight& w, float* y,
                               int64_t ldy, int64_t p0, int64_t p1) {
    amx_panels(xp, M, ldp, w, p0, p1, [&](int64_t m, int64_t p, __m512 gate, __m512 up) {
        _mm512_storeu_ps(y + m * ldy + p * 16, _mm512_mul_ps(simd::vsilu(gate), up));
    });
}

void linear_bf16dot_swiglu(const uint32_t* xp, int64_t M, int64_t ldp, const PackedWeight& w, float* y,
                           int64_t ldy, int64_t p0, int64_t p1) {
    if (M <= kMRdot) {  // a decode batch: one tile per panel, streamed
        for (int64_t p = p0; p < p1; ++p)
            tile_swiglu_dispatch<kMRdot, true>(static_cast<int>(M), xp, ldp, w.bf16_panel(p), w.K2,
                                               y + p * 16, ldy);
        return;
    }
    const int64_t slab = slab_rows(w.K2 * 4, kMRdot);  // ops/cpu/row_slabs.h
    for (int64_t s0 = 0; s0 < M; s0 += slab) {
        const int64_t s1 = std::min(M, s0 + slab);
        for (int64_t p = p0; p < p1; ++p) {
            PanelAhead ahead(w, p, 0, w.K2, s0, s1);
            for (int64_t m0 = s0; m0 < s1; m0 += kMRdot) {
                const int mr = static_cast<int>(std::min<int64_t>(kMRdot, s1 - m0));
                tile_swiglu_dispatch<kMRdot>(mr, xp + m0 * ldp, ldp, w.bf16_panel(p), w.K2,
                                             y + m0 * ldy + p * 16, ldy, ahead.take());
            }
        }
    }
}

namespace {
void start_argmax(int64_t M, float* best_val, int64_t* best_idx) {
    for (int64_t m = 0; m < M; ++m) {
        best_val[m] = -INFINITY;
        best_idx[m] = -1;
    }
}
// Row m's products of panel p (ncols of them at `row`) against its best so far: the first maximum.
void scan_argmax(int64_t m, int64_t p, const float* row, int ncols, float* best_val, int64_t* best_idx) {
    for (int c = 0; c < ncols; ++c)
        if (row[c] > best_val[m] || best_idx[m] < 0) {
            best_val[m] = row[c];
            best_idx[m] = p * kPanelCols + c;
        }
}
}  // namespace

void linear_bf16dot_argmax_amx(const uint32_t* xp, int64_t M, int64_t ldp, const PackedWeight& w, int64_t p0,
                               int64_t p1, float* best_val, int64_t* best_idx) {
    alignas(64) float tile[kPanelCols];
    start_argmax(M, best_val, best_idx);
    amx_panels(xp, M, ldp, w, p0, p1, [&](int64_t m, int64_t p, __m512 v0, __m512 v1) {
        _mm512_store_ps(tile, v0);
        _mm512_store_ps(tile + 16, v1);
        scan_argmax(m, p, tile, static_cast<int>(std::min<int64_t>(kPanelCols, w.N - p * kPanelCols)),
                    best_val, best_idx);
    });
}

void linear_bf16dot_argmax(const uint32_t* xp, int64_t M, int64_t ldp, const PackedWeight& w, int64_t p0,
                           int64_t p1, float* best_val, int64_t* best_idx) {
    // The same tiles as linear_bf16dot (so the values are bitwise those of the materialised logits), stored
    // into a 12 x 32 buffer that stays in L1 instead of an [M, N] output.
    alignas(64) float tile[kMRdot * kPanelCols];
    start_argmax(M, best_val, best_idx);
    auto scan = [&](int64_t m, int64_t p, const float* row, int ncols) {
        scan_argmax(m, p, row, ncols, best_val, best_idx);
    };
    for (int64_t p = p0; p < p1; ++p) {
        const int ncols = static_cast<int>(std::min<int64_t>(kPanelCols, w.N - p * kPanelCols));
        for (int64_t m0 = 0; m0 < M; m0 += kMRdot) {
            const int mr = static_cast<int>(std::min<int64_t>(kMRdot, M - m0));
            if (M <= kMRdot)  // one tile per panel: streamed
                tile_dot_dispatch<kMRdot, true>(mr, xp, ldp, w.bf16_panel(p), 0, w.K2, tile, kPanelCols,
                                                ncols, false, false);
            else
                tile_dot_dispatch<kMRdot>(mr, xp + m0 * ldp, ldp, w.bf16_panel(p), 0, w.K2, tile, kPanelCols,
                                          ncols, false, false);
            for (int r = 0; r < mr; ++r) scan(m0 + r, p, tile + r * kPanelCols, ncols);
        }
    }
}

void pack_bf16_pairs(const float* x, int64_t M, int64_t K, uint32_t* xp, int64_t K2) {
    for (int64_t m = 0; m < M; ++m) {
        const float* xr = x + m * K;
        uint32_t* d = xp + m * K2;
        int64_t k = 0;
        for (; k + 32 <= K; k += 32) {
            // cvtne2ps: 32 bf16 = [second arg (k..k+15) | first arg (k+16..k+31)] -> pairs in memory order
            __m512bh h = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(xr + k + 16), _mm512_loadu_ps(xr + k));
            _mm512_storeu_si512(d + k / 2, (__m512i)h);
        }
        for (; k < K; k += 2) {
            const uint32_t lo = f32_to_bf16(xr[k]);
            const uint32_t hi = k + 1 < K ? f32_to_bf16(xr[k + 1]) : 0;
            d[k / 2] = lo | hi << 16;
        }
    }
}

void linear_bf16dot_amx(const uint32_t* xp, int64_t M, int64_t ldp, const PackedWeight& w, float* y,
                        int64_t ldy, int64_t p0, int64_t p1, bool round_out) {
    amx_panels(xp, M, ldp, w, p0, p1, [&](int64_t m, int64_t p, __m512 v0, __m512 v1) {
        const int ncols = static_cast<int>(std::min<int64_t>(kPanelCols, w.N - p * kPanelCols));
        float* yr = y + m * ldy + p * kPanelCols;
        _mm512_mask_storeu_ps(yr, simd::lanes_mask(ncols), round_out ? simd::vround_bf16(v0) : v0);
        _mm512_mask_storeu_ps(yr + 16, simd::lanes_mask(ncols - 16), round_out ? simd::vround_bf16(v1) : v1);
    });
}

void linear_bf16dot(const uint32_t* xp, int64_t M, int64_t ldp, const PackedWeight& w, float* y, int64_t ldy,
                    int64_t p0, int64_t p1, bool round_out) {
    if (M <= kMRdot) {
        // Decode / small batches: one pass over each weight panel, all rows at once (bandwidth bound).
        for (int64_t p = p0; p < p1; ++p) {
            const int ncols = static_cast<int>(std::min<int64_t>(kPanelCols, w.N - p * kPanelCols));
            tile_dot_dispatch<kMRdot, true>(static_cast<int>(M), xp, ldp, w.bf16_panel(p), 0, w.K2,
                                            y + p * kPanelCols, ldy, ncols, false, round_out);
        }
        return;
    }
    // Prefill: k-blocks of a panel stay in L1 while the row blocks of a slab (ops/cpu/row_slabs.h) stream
    // past them.
    const int64_t slab = slab_rows(std::min(w.K2, kKcPairs) * 4, kMRdot);
    for (int64_t s0 = 0; s0 < M; s0 += slab) {
        const int64_t s1 = std::min(M, s0 + slab);
        for (int64_t kk0 = 0; kk0 < w.K2; kk0 += kKcPairs) {
            const int64_t kk1 = std::min(w.K2, kk0 + kKcPairs);
            for (int64_t p = p0; p < p1; ++p) {
                const int ncols = static_cast<int>(std::min<int64_t>(kPanelCols, w.N - p * kPanelCols));
                const uint16_t* B = w.bf16_panel(p);
                PanelAhead ahead(w, p, kk0, kk1, s0, s1);
                for (int64_t m0 = s0; m0 < s1; m0 += kMRdot) {
                    const int mr = static_cast<int>(std::min<int64_t>(kMRdot, s1 - m0));
                    tile_dot_dispatch<kMRdot>(mr, xp + m0 * ldp, ldp, B, kk0, kk1,
                                              y + m0 * ldy + p * kPanelCols, ldy, ncols, kk0 > 0,
                                              round_out && kk1 == w.K2, ahead.take());
                }
            }
        }
    }
}

}  // namespace gdn::cpu::avx512
