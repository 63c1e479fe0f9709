// The value choice of the super-block formats Q4K and Q6K (ops/weight_format.h): what numbers a
// super-block of 256 k of one column stores, independent of where the bytes go (quant_format.cpp).
// The fits are those of ggml's reference quantizers (make_qkx2_quants for Q4_K, make_qx_quants with
// x^2 weights for Q6_K), which bench/llama_quant_emulation also runs to emulate llama.cpp's files.
#pragma once

#include <algorithm>
#include <cstdint>

namespace gdn::kquant {

// Q4K: 8 sub-blocks of 32, value = d * sc[j] * q - dmin * m[j], q in [0, 15], sc and m 6-bit levels,
// d and dmin already rounded to f16 (their bits in d_bits / dmin_bits).
struct Q4KBlock {
    float d = 0.0f, dmin = 0.0f;
    uint16_t d_bits = 0, dmin_bits = 0;
    uint8_t sc[8] = {}, m[8] = {};
    uint8_t q[256] = {};
};
// Q6K: 8 sub-blocks of 32, value = d * sc[j] * q, q in [-32, 31], sc an int8 level, d f16.
struct Q6KBlock {
    float d = 0.0f;
    uint16_t d_bits = 0;
    int8_t sc[8] = {};
    int8_t q[256] = {};
};

// How a Q4K block is fitted. GGML: quantize_row_q4_K_ref exactly (each value weighted by its size over
// the sub-block's RMS, levels rounded from the unrounded fit): what llama-quantize writes without an
// importance matrix, for bench/llama_quant_emulation. ENGINE: the same search on the plain squared
// error, then the 6-bit levels re-chosen within +-2 against the rounded d and dmin: what we pack.
enum class Q4KFit { GGML, ENGINE };

// x: 256 values (zero padded by the caller). A block holding a NaN or an infinity becomes zeros and
// sets *nonfinite.
Q4KBlock quantize_q4k(const float* x, Q4KFit fit = Q4KFit::ENGINE, bool* nonfinite = nullptr);
Q6KBlock quantize_q6k(const float* x, bool* nonfinite = nullptr);

// ggml's rounding: round to nearest even.
int nearest_int(float v);
// nearest_int as a float, clamped to [lo, hi]: the same value, in arithmetic the compiler vectorises.
inline float round_clamped(float v, float lo, float hi) {
    const float r = (v + 12582912.0f) - 12582912.0f;
    return std::min(std::max(r, lo), hi);
}
// The value of largest magnitude with its sign (the first on a tie).
float largest_magnitude(const float* x, int n);

// make_qkx2_quants: x ~ scale * L + min (L in 0..nmax, min <= 0) for n <= 256 values under weights w,
// trying nstep + 1 stretched grids with a weighted least-squares fit each. Returns the scale;
// *neg_min = -min, L the levels.
float fit_scale_and_min(const float* x, const float* w, int n, int nmax, float rmin, float rdelta, int nstep,
                        uint8_t* L, float* neg_min);

// make_qx_quants with rmse_type 1 (weights x^2): the scale of the symmetric grid -nmax..nmax-1 with the
// largest-magnitude value at -nmax, refined over 18 stretched grids.
float fit_symmetric_scale(const float* x, int n, int nmax);

// The ENGINE fit's last step for one sub-block of 32: of the levels within +-2 of (*sc, *m), the pair
// whose squared error, with each q re-chosen for d * sc and dmin * m, is smallest (the first in (sc, m)
// order; the given pair unless one is strictly better).
void rechoose_levels(const float* x, float d, float dmin, uint8_t* sc, uint8_t* m);

// fit_scale_and_min's first pass, shared by both forms: the range with its low end at most 0, and the
// weighted sums of w and w x.
struct FitRange {
    float lo, hi, sum_w, sum_x;
    // All values equal: levels 0 and the minimum at lo (the fit's scale is 0). True when it did so.
    bool flat(int n, uint8_t* L, float* neg_min) const {
        if (hi != lo) return false;
        std::fill(L, L + n, 0);
        *neg_min = -lo;
        return true;
    }
};
FitRange fit_range(const float* x, const float* w, int n);

// fit_scale_and_min takes at most this many grids (nstep + 1).
constexpr int kMaxGrids = 24;

// The three searches above as ggml writes them, one candidate after another (kquant_reference.cpp):
// their definitions. The ones above evaluate the candidates side by side and are bitwise these
// (KQuant.FitsAreBitwiseTheirDefinitions); quantizing at load spent most of its time in these loops.
namespace ref {
float fit_scale_and_min(const float* x, const float* w, int n, int nmax, float rmin, float rdelta, int nstep,
                        uint8_t* L, float* neg_min);
float fit_symmetric_scale(const float* x, int n, int nmax);
void rechoose_levels(const float* x, float d, float dmin, uint8_t* sc, uint8_t* m);
}  // namespace ref

}  // namespace gdn::kquant
