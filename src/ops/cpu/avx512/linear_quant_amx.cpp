// The quantized products on AMX-INT8 tiles (where dispatch.h has_amx_int8(), from amx_min_rows(format)
// rows on: decode batches, verifies, prefill). On a core whose vpdpbusd issues once a cycle the VNNI kernels
// (linear_quant_avx512.cpp, linear_kquant_avx512.cpp) are bound by their 8 vpdpbusd per row, group and
// 16 columns from a few rows on; one tdpbssd takes 16 rows of a group and 16 columns. Per panel, 16-row
// block and group of 32 k:
//
//   D [rows, 32] int32 = xq rows [rows, 32 bytes] x the group's q as 8 k-quads [8, 32 columns x 4 bytes]
//                        (tdpbssd: signed x signed; two C tiles of 16 columns, the A tile loaded once)
//   sum [rows, 32] += float(D) * (a * xs)  [- b * (xs * S) for int4-k]   (vectors, after the tiles
//                     are stored)
//
// The group's q operand: int8 blocks are stored as k-quads and are loaded as they are; int4, int4-k and
// int6-k groups are unpacked as the exact signed q (nibble - 8, nibble, u - 32; into an L1 buffer per
// group in a decode batch, once per panel for all row blocks of a prefill slab), so D
// is the same integer the VNNI kernels reach through their offsets (|32 x 127 x 127| < 2^31), and the
// epilogue is theirs operation for operation, in the same group order: every output has the VNNI
// kernel's bits, so a row's sums do not depend on its batch (OpsLinear.QuantizedRowsDoNotDependOnTheBatch).
// The per-group epilogue, not the tiles, bounds the kernel.
#define GDN_SIMD_AVX512
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/cpu/avx512/amx_tiles.h"
#include "ops/cpu/avx512/quant_tiles_avx512.h"
#include "ops/cpu/linear_quant_kernels.h"
#include "ops/quant/quant_format.h"

namespace gdn::cpu::avx512 {

namespace {

// Tiles: 0, 1 and 2, 3 = C of even / odd groups (columns 0-15, 16-31; rows x 16 int32), 4 / 7 = the rows'
// group bytes of even / odd groups (rows x 32 bytes), 5, 6 = the group's k-quads (8 x 64 bytes per 16
// columns). Two groups in flight: a group's C tiles are stored while the next one's products run.
void configure_quant_tiles(int rows) {
    amx::TileConfig c;
    auto set = [&](int t, int r, int colsb) {
        c.rows[t] = static_cast<uint8_t>(r);
        c.colsb[t] = static_cast<uint16_t>(colsb);
    };
    for (int t : {0, 1, 2, 3}) set(t, rows, 64);
    set(4, rows, 32), set(7, rows, 32), set(5, 8, 64), set(6, 8, 64);
    amx::load_config(c);
}

// Asks for `bytes` of a panel's stream kStreamPrefetchBytes ahead of p (the panel streams from memory in
// a decode step; in prefill a slab's later row blocks find it in cache and the requests cost little).
// Asking only for the first row block's (a bool down to here) measured 25% slower int8 decode steps: GCC
// 12 then dropped every prefetch from the kernel (objdump: none left).
inline void stream_ahead(const uint8_t* p, int64_t bytes) {
    for (int64_t off = 0; off < bytes; off += 64)
        _mm_prefetch(reinterpret_cast<const char*>(p) + amx::kStreamPrefetchBytes + off, _MM_HINT_T0);
}

// Bytes of a group's tile-ready k-quads (8 quads x 32 columns x 4).
constexpr int64_t kGroupOperandBytes = kQuantGroup * quant::kCols;

// A group's epilogue constants for the 32 columns (two vectors of 16): y += D a xs [- b xs S].
struct GroupScales {
    __m512 a[2], b[2];
};

// Per format: operand(panel, g, buf) returns group g of a panel (its first block) as tile-ready signed
// k-quads [8][32 columns][4] (the stored block, or buf [kGroupOperandBytes] filled), scales(...) its
// GroupScales. Block sizes are the format's constants.
// kMinimum: the epilogue subtracts b xs S (int4-k).
template <WeightFormat F>
struct GroupsOf;

// int8's and int4's group scale: one f16 per column at f16.
inline void f16_scales(const uint8_t* f16, GroupScales* s) {
    s->a[0] = f16x16(f16);
    s->a[1] = f16x16(f16 + 32);
}

template <>
struct GroupsOf<WeightFormat::Q8> {
    static constexpr bool kMinimum = false;
    static const uint8_t* operand(const uint8_t* panel, int64_t g, uint8_t*) {
        const uint8_t* blk = panel + g * quant::kQ8BlockBytes;
        stream_ahead(blk, quant::kQ8BlockBytes);
        return blk;
    }
    static void scales(const uint8_t* panel, int64_t g, GroupScales* s) {
        f16_scales(panel + g * quant::kQ8BlockBytes + quant::f16_offset(WeightFormat::Q8), s);
    }
};

// A group's nibble pairs (4 quad pair rows of 128 B: 32 columns x 4) as k-quads into buf: row j's low
// nibbles are quad 2j, its high ones quad 2j + 1, `bias` subtracted (int4's + 8; 0 for int4-k).
inline const uint8_t* split_nibbles(const uint8_t* pairs, int8_t bias, uint8_t* buf) {
    const __m512i low4 = _mm512_set1_epi8(0x0F), b8 = _mm512_set1_epi8(bias);
    for (int j = 0; j < 4; ++j)
        for (int v = 0; v < 2; ++v) {
            const __m512i b = _mm512_loadu_si512(pairs + j * 128 + v * 64);
            const __m512i lo = _mm512_and_si512(b, low4),
                          hi = _mm512_and_si512(_mm512_srli_epi16(b, 4), low4);
            _mm512_store_si512(buf + (2 * j) * 128 + v * 64, _mm512_sub_epi8(lo, b8));
            _mm512_store_si512(buf + (2 * j + 1) * 128 + v * 64, _mm512_sub_epi8(hi, b8));
        }
    return buf;
}

template <>
struct GroupsOf<WeightFormat::Q4> {
    static constexpr bool kMinimum = false;
    static const uint8_t* operand(const uint8_t* panel, int64_t g, uint8_t* buf) {
        const uint8_t* blk = panel + g * quant::kQ4BlockBytes;
        stream_ahead(blk, quant::kQ4BlockBytes);
        return split_nibbles(blk, 8, buf);
    }
    static void scales(const uint8_t* panel, int64_t g, GroupScales* s) {
        f16_scales(panel + g * quant::kQ4BlockBytes + quant::f16_offset(WeightFormat::Q4), s);
    }
};

// The super-block formats: group g is record g % 8 of block g / 8, the f16 fields at the block's end.
constexpr int64_t kGroupsPerBlock = kSuperBlock / kQuantGroup;
template <WeightFormat F>
inline const uint8_t* record_of(const uint8_t* panel, int64_t g, int64_t record_bytes) {
    return panel + (g / kGroupsPerBlock) * quant::block_bytes(F) + (g % kGroupsPerBlock) * record_bytes;
}
template <WeightFormat F>
inline const uint8_t* f16_of(const uint8_t* panel, int64_t g) {
    return panel + (g / kGroupsPerBlock) * quant::block_bytes(F) + quant::f16_offset(F);
}

template <>
struct GroupsOf<WeightFormat::Q4K> {
    static constexpr bool kMinimum = true;
    static const uint8_t* operand(const uint8_t* panel, int64_t g, uint8_t* buf) {
        const uint8_t* rec = record_of<WeightFormat::Q4K>(panel, g, quant::kQ4KRecordBytes);
        stream_ahead(rec, quant::kQ4KRecordBytes);
        return split_nibbles(rec, 0, buf);
    }
    static void scales(const uint8_t* panel, int64_t g, GroupScales* s) {
        const uint8_t* lv =
            record_of<WeightFormat::Q4K>(panel, g, quant::kQ4KRecordBytes) + quant::kQ4KLevelsOffset;
        const uint8_t* f16 = f16_of<WeightFormat::Q4K>(panel, g);
        for (int v = 0; v < 2; ++v)
            q4k_group_scales(lv, v, f16x16(f16 + 32 * v), f16x16(f16 + 64 + 32 * v), &s->a[v], &s->b[v]);
    }
};

template <>
struct GroupsOf<WeightFormat::Q6K> {
    static constexpr bool kMinimum = false;
    static const uint8_t* operand(const uint8_t* panel, int64_t g, uint8_t* buf) {
        const uint8_t* rec = record_of<WeightFormat::Q6K>(panel, g, quant::kQ6KRecordBytes);
        stream_ahead(rec, quant::kQ6KRecordBytes);
        const __m512i bias = _mm512_set1_epi8(32);
        for (int s = 0; s < 4; ++s)
            for (int v = 0; v < 2; ++v) {
                __m512i lo, hi;
                q6k_quads(rec, s, v, &lo, &hi);
                _mm512_store_si512(buf + (2 * s) * 128 + v * 64, _mm512_sub_epi8(lo, bias));
                _mm512_store_si512(buf + (2 * s + 1) * 128 + v * 64, _mm512_sub_epi8(hi, bias));
            }
        return buf;
    }
    static void scales(const uint8_t* panel, int64_t g, GroupScales* s) {
        const uint8_t* rec = record_of<WeightFormat::Q6K>(panel, g, quant::kQ6KRecordBytes);
        const uint8_t* f16 = f16_of<WeightFormat::Q6K>(panel, g);
        s->a[0] = q6k_group_scale(rec, f16, 0);
        s->a[1] = q6k_group_scale(rec, f16, 1);
    }
};

// The tile numbers are immediates of the tile instructions (macros that stringify them), hence a macro:
// a group's products into C tiles c0, c1 with its rows in A tile a and its k-quads at q.
#define GDN_QUANT_GROUP_PRODUCT(a, c0, c1, xg, ldx, q) \
    do {                                               \
        _tile_loadd(a, xg, ldx);                       \
        _tile_loadd(5, q, 128);                        \
        _tile_loadd(6, (q) + 64, 128);                 \
        _tile_zero(c0);                                \
        _tile_zero(c1);                                \
        _tile_dpbssd(c0, a, 5);                        \
        _tile_dpbssd(c1, a, 6);                        \
    } while (0)

// A panel's sums (panel: its first block) for the rows of x (at most 16, the tiles configured for them)
// into sum [rows][32].
// xs_sum [rows][x.G]: xs S of each row and group (int4-k's minimum term; made once per slab; null for
// the other formats). unpacked: the panel's groups as operand() makes them, made once for a slab of
// several row blocks; null: each group unpacked here.
template <WeightFormat F>
inline void panel_rows(const quant::QuantRowsView& x, const float* xs_sum, const uint8_t* panel,
                       const uint8_t* unpacked, float* sum) {
    using Groups = GroupsOf<F>;
    const int rows = static_cast<int>(x.M);
    alignas(64) int32_t c[2][16 * 32];  // a group's C tiles, [rows][16] twice (columns 0-15, 16-31)
    alignas(64) uint8_t buf[2][kGroupOperandBytes];  // unpacked k-quads of the two groups in flight
    std::fill(sum, sum + rows * 32, 0.0f);
    // The VNNI kernels' group step for groups [g, g + n) in order (n = 1 or 2), one pass over the rows'
    // sums: sum = fma(float(D), a xs, sum), then for int4-k sum = fnmadd(b, xs S, sum).
    auto epilogue = [&](int64_t g, int n) {
        GroupScales gs[2];
        for (int i = 0; i < n; ++i) Groups::scales(panel, g + i, &gs[i]);
        for (int m = 0; m < rows; ++m) {
            float* sm = sum + m * 32;
            __m512 s0 = _mm512_load_ps(sm), s1 = _mm512_load_ps(sm + 16);
            for (int i = 0; i < n; ++i) {
                const int64_t at = m * x.G + g + i;
                const __m512 xs = _mm512_set1_ps(x.xs[at]);
                const __m512i a0 = _mm512_load_si512(c[i] + m * 16);
                const __m512i a1 = _mm512_load_si512(c[i] + 16 * 16 + m * 16);
                s0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a0), _mm512_mul_ps(gs[i].a[0], xs), s0);
                s1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a1), _mm512_mul_ps(gs[i].a[1], xs), s1);
                if constexpr (Groups::kMinimum) {
                    const __m512 xss = _mm512_set1_ps(xs_sum[at]);
                    s0 = _mm512_fnmadd_ps(gs[i].b[0], xss, s0);
                    s1 = _mm512_fnmadd_ps(gs[i].b[1], xss, s1);
                }
            }
            _mm512_store_ps(sm, s0);
            _mm512_store_ps(sm + 16, s1);
        }
    };
    // Groups two at a time: each pair's products run while the previous pair's tiles are read back.
    int64_t g = 0;
    for (; g + 1 < x.G; g += 2) {
        const uint8_t* q0 = unpacked ? unpacked + g * kGroupOperandBytes : Groups::operand(panel, g, buf[0]);
        const uint8_t* q1 =
            unpacked ? unpacked + (g + 1) * kGroupOperandBytes : Groups::operand(panel, g + 1, buf[1]);
        GDN_QUANT_GROUP_PRODUCT(4, 0, 1, x.xq + g * kQuantGroup, x.Kp, q0);
        GDN_QUANT_GROUP_PRODUCT(7, 2, 3, x.xq + (g + 1) * kQuantGroup, x.Kp, q1);
        _tile_stored(0, c[0], 64);
        _tile_stored(1, c[0] + 16 * 16, 64);
        _tile_stored(2, c[1], 64);
        _tile_stored(3, c[1] + 16 * 16, 64);
        epilogue(g, 2);
    }
    if (g < x.G) {
        const uint8_t* q0 = unpacked ? unpacked + g * kGroupOperandBytes : Groups::operand(panel, g, buf[0]);
        GDN_QUANT_GROUP_PRODUCT(4, 0, 1, x.xq + g * kQuantGroup, x.Kp, q0);
        _tile_stored(0, c[0], 64);
        _tile_stored(1, c[0] + 16 * 16, 64);
        epilogue(g, 1);
    }
}

// Rows [m0, m0 + n) of x as a view of their own.
quant::QuantRowsView rows_of(const quant::QuantRowsView& x, int64_t m0, int64_t n) {
    quant::QuantRowsView v = x;
    v.M = n;
    v.xq += m0 * x.Kp;
    v.xs += m0 * x.G;
    v.xsum += m0 * x.G;
    return v;
}

}  // namespace

template <WeightFormat F, bool kSwiglu>
void amx_quant_panels(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy, int64_t p0,
                      int64_t p1) {
    alignas(64) float sum[16 * 32];  // [rows][32]
    // Rows in L2-sized slabs (ops/cpu/row_slabs.h), each panel against every 16-row block of a slab.
    const int64_t slab = slab_rows(x.Kp, 16);
    // Formed once per slab instead of once per panel and row block (the same values): int4-k's xs S of
    // the slab's rows, and a panel's unpacked groups when the slab has several row blocks (unpacking
    // them per block measured ~10% of the int4 formats' M = 512 products, bench_ops BM_LinearQuant).
    thread_local std::vector<float> xs_sum;
    struct alignas(64) GroupOperand {  // a group's k-quads, aligned for the unpacking's stores
        uint8_t bytes[kGroupOperandBytes];
    };
    thread_local std::vector<GroupOperand> panel_q;  // [x.G]
    int configured = 0;
    for (int64_t s0 = 0; s0 < x.M; s0 += slab) {
        const int64_t s1 = std::min(x.M, s0 + slab);
        if constexpr (GroupsOf<F>::kMinimum) {
            if (static_cast<int64_t>(xs_sum.size()) < (s1 - s0) * x.G) xs_sum.resize((s1 - s0) * x.G);
            for (int64_t i = s0 * x.G; i < s1 * x.G; ++i)
                xs_sum[i - s0 * x.G] = x.xs[i] * static_cast<float>(x.xsum[i]);
        }
        const bool unpack_once = F != WeightFormat::Q8 && s1 - s0 > 16;
        if (unpack_once && static_cast<int64_t>(panel_q.size()) < x.G) panel_q.resize(x.G);
        for (int64_t p = p0; p < p1; ++p) {
            const int ncols = static_cast<int>(std::min<int64_t>(quant::kCols, w.N - p * quant::kCols));
            const uint8_t* panel = w.quant_block(p, 0);
            const uint8_t* unpacked = nullptr;
            if (unpack_once) {
                uint8_t* u = panel_q.data()->bytes;
                for (int64_t g = 0; g < x.G; ++g) GroupsOf<F>::operand(panel, g, u + g * kGroupOperandBytes);
                unpacked = u;
            }
            for (int64_t m0 = s0; m0 < s1; m0 += 16) {
                const int rows = static_cast<int>(std::min<int64_t>(16, s1 - m0));
                if (rows != configured) configure_quant_tiles(configured = rows);
                const float* xss = GroupsOf<F>::kMinimum ? xs_sum.data() + (m0 - s0) * x.G : nullptr;
                panel_rows<F>(rows_of(x, m0, rows), xss, panel, unpacked, sum);
                float* yr = y + m0 * ldy;
                for (int m = 0; m < rows; ++m) {
                    const __m512 v0 = _mm512_load_ps(sum + m * 32), v1 = _mm512_load_ps(sum + m * 32 + 16);
                    if constexpr (kSwiglu) {
                        _mm512_storeu_ps(yr + m * ldy + p * 16, _mm512_mul_ps(simd::vsilu(v0), v1));
                    } else {
                        _mm512_mask_storeu_ps(yr + m * ldy + p * 32, first_lanes(ncols), v0);
                        _mm512_mask_storeu_ps(yr + m * ldy + p * 32 + 16, first_lanes(ncols - 16), v1);
                    }
                }
            }
        }
    }
    amx::release();
}

#define GDN_AMX_QUANT_PANELS(F)                                                                        \
    template void amx_quant_panels<F, false>(const quant::QuantRowsView&, const PackedWeight&, float*, \
                                             int64_t, int64_t, int64_t);                               \
    template void amx_quant_panels<F, true>(const quant::QuantRowsView&, const PackedWeight&, float*,  \
                                            int64_t, int64_t, int64_t);
GDN_AMX_QUANT_PANELS(WeightFormat::Q8)
GDN_AMX_QUANT_PANELS(WeightFormat::Q4)
GDN_AMX_QUANT_PANELS(WeightFormat::Q4K)
GDN_AMX_QUANT_PANELS(WeightFormat::Q6K)
#undef GDN_AMX_QUANT_PANELS

}  // namespace gdn::cpu::avx512
