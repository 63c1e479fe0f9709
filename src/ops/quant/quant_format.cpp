#include "ops/quant/quant_format.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "core/log.h"
#include "core/thread_pool.h"
#include "core/thread_scratch.h"
#include "ops/packed_weight.h"
#include "ops/quant/kquant.h"

namespace gdn::quant {

namespace {

// Where (column c, k = kg within the group) lives inside a block: quant_format.h's layout, in one place.
inline int64_t q8_byte(int64_t c, int64_t kg) {
    return ((kg / 4) * kCols + c) * 4 + kg % 4;
}
inline int64_t nib_byte(int64_t c, int64_t kg) {
    return ((kg / 8) * kCols + c) * 4 + kg % 4;
}
inline bool nib_high(int64_t kg) {
    return (kg % 8) / 4 != 0;
}
// Q6K: the byte (in the group record) and bit shift of the high bit pair of (c, kg).
inline int64_t q6_high_byte(int64_t c, int64_t kg) {
    const int64_t r = nib_byte(c, kg), v = (r % 128) / 32;
    return kQ6KHighOffset + (r / 128) * 64 + (v / 2) * 32 + r % 32;
}
inline int q6_high_shift(int64_t c, int64_t kg) {
    const int64_t v = (nib_byte(c, kg) % 128) / 32;
    return static_cast<int>((v % 2) * 4 + (nib_high(kg) ? 2 : 0));
}
// Where group g's record starts in a block, and its group within the block.
inline int64_t record_offset(WeightFormat f, int64_t g) {
    const int64_t j = g % (weight_block_k(f) / kQuantGroup);
    return f == WeightFormat::Q4K     ? j * kQ4KRecordBytes
           : f == WeightFormat::Q6K   ? j * kQ6KRecordBytes
           : f == WeightFormat::Q6K16 ? j * kQ6K16RecordBytes
                                      : 0;
}
inline void set_nibble(uint8_t* rec, int64_t c, int64_t kg, uint8_t v) {
    uint8_t& b = rec[nib_byte(c, kg)];
    b = nib_high(kg) ? static_cast<uint8_t>((b & 0x0F) | (v << 4))
                     : static_cast<uint8_t>((b & 0xF0) | (v & 0x0F));
}
inline int get_nibble(const uint8_t* rec, int64_t c, int64_t kg) {
    const uint8_t b = rec[nib_byte(c, kg)];
    return nib_high(kg) ? b >> 4 : b & 0x0F;
}
inline uint16_t load_f16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return h;
}

// f16 round trip of a scale: the value the kernels multiply by.
inline float f16_round(float s) {
    return f16_to_f32(f32_to_f16(s));
}

// Round to nearest even of v clamped to [lo, hi], without a libm call (so the loops vectorise on the
// baseline ISA): adding 1.5 * 2^23 leaves the integer part in the mantissa under the default rounding.
inline float round_clamped(float v, float lo, float hi) {
    v = std::min(std::max(v, lo), hi);
    return (v + 12582912.0f) - 12582912.0f;
}

// Squared error of w ~= d * q with q = round(w / d) clamped to [lo, hi] over one zero-padded group of
// 32 (padding adds nothing); q written out, and sum w q, sum q q for a least-squares refit. Eight
// partial sums, so the loops vectorise.
float group_error(const float* w, float d, float lo, float hi, int8_t* q, float* wq = nullptr,
                  float* qq = nullptr) {
    float part[8] = {0, 0, 0, 0, 0, 0, 0, 0}, pwq[8] = {0, 0, 0, 0, 0, 0, 0, 0},
          pqq[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const float inv = d != 0.0f ? 1.0f / d : 0.0f;
    float r[kQuantGroup];
    for (int i = 0; i < kQuantGroup; ++i) r[i] = round_clamped(w[i] * inv, lo, hi);
    for (int i = 0; i < kQuantGroup; i += 8)
        for (int j = 0; j < 8; ++j) {
            const float e = w[i + j] - d * r[i + j];
            part[j] += e * e;
            pwq[j] += w[i + j] * r[i + j];
            pqq[j] += r[i + j] * r[i + j];
        }
    for (int i = 0; i < kQuantGroup; ++i) q[i] = static_cast<int8_t>(r[i]);
    auto sum8 = [](const float* p) {
        return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
    };
    if (wq) *wq = sum8(pwq);
    if (qq) *qq = sum8(pqq);
    return sum8(part);
}

}  // namespace

uint16_t quantize_group(WeightFormat f, const float* w_in, int n, int8_t* q, bool* nonfinite) {
    float w[kQuantGroup] = {};
    std::copy(w_in, w_in + n, w);
    float amax = 0.0f, smax = 0.0f;  // largest magnitude, and that value with its sign
    bool finite = true;
    for (int i = 0; i < n; ++i) {
        finite = finite && std::isfinite(w[i]);
        if (std::abs(w[i]) > amax) {
            amax = std::abs(w[i]);
            smax = w[i];
        }
    }
    int8_t full[kQuantGroup];
    if (amax == 0.0f || !finite) {  // a non-finite group becomes zeros and is reported to the caller
        if (!finite && nonfinite) *nonfinite = true;
        std::fill(q, q + n, 0);
        return 0;
    }
    if (f == WeightFormat::Q8) {
        const float d = f16_round(amax / 127.0f);
        group_error(w, d, -127.0f, 127.0f, full);
        std::copy(full, full + n, q);
        return f32_to_f16(d);
    }
    GDN_CHECK(f == WeightFormat::Q4, "quantize_group: %s is not a format of 32-k blocks",
              weight_format_name(f));
    // int4 levels are [-8, 7]: the largest magnitude may map to -8 (a scale of -smax / 8 puts it there)
    // or to +-7, or between when clipping a lone outlier lowers the error of the other 31. Candidates:
    // -smax / t for t in {7, 7.75, 8.5} (both signs of the level set), each refined once by least
    // squares on its q (d = sum w q / sum q q), keeping the lowest error. Demo-model mean KLD against
    // f32 (int8 lm_head): this set 0.01210; t in [6.5, 9] by 1/2 0.01214, by 1/4 0.01219 (2x and 4x the
    // load time); {7, 8} 0.01398; {7.5} alone 0.01493.
    int8_t cand[kQuantGroup];
    float best = -1.0f, best_d = 0.0f;
    auto consider = [&](float d, float e) {
        if (best < 0.0f || e < best) {
            best = e;
            best_d = d;
            std::memcpy(full, cand, kQuantGroup);
        }
    };
    for (const float t : {7.0f, 7.75f, 8.5f}) {
        for (float sign : {1.0f, -1.0f}) {
            const float d0 = f16_round(sign * -smax / t);
            if (d0 == 0.0f || !std::isfinite(d0)) continue;
            float wq = 0.0f, qq = 0.0f;
            consider(d0, group_error(w, d0, -8.0f, 7.0f, cand, &wq, &qq));
            const float d1 = qq > 0.0f ? f16_round(wq / qq) : 0.0f;
            if (d1 != 0.0f && std::isfinite(d1)) consider(d1, group_error(w, d1, -8.0f, 7.0f, cand));
        }
    }
    std::copy(full, full + n, q);
    return f32_to_f16(best_d);
}

void set_quantized_shape(WeightFormat f, int64_t N, int64_t K, PackedWeight* w) {
    w->format = f;
    w->N = N;
    w->K = K;
    w->K2 = (K + 1) / 2;
    w->n_panels = (N + kCols - 1) / kCols;
    w->n_blocks = n_blocks(f, K);
}

void write_block_column(WeightFormat f, const ColumnBlock& v, int64_t c, uint8_t* blk) {
    if (f == WeightFormat::Q8X) {
        for (int k = 0; k < kQuantGroup; ++k) blk[q8_byte(c, k)] = static_cast<uint8_t>(v.q[k]);
        for (int h = 0; h < 2; ++h) {
            std::memcpy(blk + kQ8XScalesOffset + (h * kCols + c) * 4, &v.a[h], 4);
            std::memcpy(blk + kQ8XScalesOffset + ((2 + h) * kCols + c) * 4, &v.b[h], 4);
        }
        return;
    }
    if (f == WeightFormat::Q8 || f == WeightFormat::Q4) {
        std::memcpy(blk + f16_offset(f) + c * 2, &v.scale_bits, 2);
        for (int k = 0; k < kQuantGroup; ++k) {
            if (f == WeightFormat::Q8)
                blk[q8_byte(c, k)] = static_cast<uint8_t>(v.q[k]);
            else
                set_nibble(blk, c, k, static_cast<uint8_t>(v.q[k] + 8));
        }
        return;
    }
    if (f == WeightFormat::Q4K) {
        const kquant::Q4KBlock& q = v.q4k;
        std::memcpy(blk + f16_offset(f) + c * 2, &q.d_bits, 2);
        std::memcpy(blk + f16_offset(f) + kCols * 2 + c * 2, &q.dmin_bits, 2);
        for (int j = 0; j < 8; ++j) {
            uint8_t* rec = blk + j * kQ4KRecordBytes;
            for (int k = 0; k < kQuantGroup; ++k) set_nibble(rec, c, k, q.q[j * kQuantGroup + k]);
            uint8_t* lv = rec + kQ4KLevelsOffset;
            lv[c] = static_cast<uint8_t>(q.sc[j] | (q.m[j] >> 4) << 6);
            uint8_t& lo = lv[32 + c % 16];
            lo = c < 16 ? static_cast<uint8_t>((lo & 0xF0) | (q.m[j] & 15))
                        : static_cast<uint8_t>((lo & 0x0F) | (q.m[j] & 15) << 4);
        }
        return;
    }
    const kquant::Q6KBlock& q = v.q6k;
    std::memcpy(blk + f16_offset(f) + c * 2, &q.d_bits, 2);
    const bool halves = f == WeightFormat::Q6K16;
    for (int j = 0; j < 8; ++j) {
        uint8_t* rec = blk + j * (halves ? kQ6K16RecordBytes : kQ6KRecordBytes);
        for (int k = 0; k < kQuantGroup; ++k) {
            const int u = q.q[j * kQuantGroup + k] + 32;  // 0..63
            set_nibble(rec, c, k, static_cast<uint8_t>(u & 15));
            uint8_t& h = rec[q6_high_byte(c, k)];
            const int sh = q6_high_shift(c, k);
            h = static_cast<uint8_t>((h & ~(3 << sh)) | ((u >> 4) << sh));
        }
        if (halves) {
            rec[kQ6KScalesOffset + c] = static_cast<uint8_t>(v.sc16[2 * j]);
            rec[kQ6KScalesOffset + kCols + c] = static_cast<uint8_t>(v.sc16[2 * j + 1]);
        } else {
            rec[kQ6KScalesOffset + c] = static_cast<uint8_t>(q.sc[j]);
        }
    }
}

namespace {

// Quantizes block_k values x (zero padded; K_left of them real) into v. Returns whether a non-finite
// value made the block zeros.
bool quantize_column_block(WeightFormat f, const float* x, int64_t K_left, ColumnBlock* v) {
    bool bad = false;
    if (f == WeightFormat::Q8 || f == WeightFormat::Q4) {
        const int len = static_cast<int>(std::min<int64_t>(kQuantGroup, K_left));
        std::fill(v->q, v->q + kQuantGroup, 0);
        v->scale_bits = quantize_group(f, x, len, v->q, &bad);
    } else if (f == WeightFormat::Q8X) {  // symmetric per half (the format's own fit: tests, not a scheme)
        for (int h = 0; h < 2; ++h) {
            float amax = 0.0f;
            for (int i = 16 * h; i < 16 * h + 16 && i < K_left; ++i) {
                bad = bad || !std::isfinite(x[i]);
                amax = std::max(amax, std::abs(x[i]));
            }
            v->a[h] = bad ? 0.0f : amax / 127.0f;
            v->b[h] = 0.0f;
            for (int i = 16 * h; i < 16 * h + 16; ++i)
                v->q[i] = static_cast<int8_t>(
                    v->a[h] > 0.0f && i < K_left ? round_clamped(x[i] / v->a[h], -127.0f, 127.0f) : 0.0f);
        }
    } else if (f == WeightFormat::Q4K) {
        v->q4k = kquant::quantize_q4k(x, kquant::Q4KFit::ENGINE, &bad);
    } else {
        v->q6k = kquant::quantize_q6k(x, &bad);  // Q6K16: the same fit, each level on both halves
        for (int j = 0; j < 8; ++j) v->sc16[2 * j] = v->sc16[2 * j + 1] = v->q6k.sc[j];
    }
    return bad;
}

// A packing thread's buffers: the column's source row and one block's values (grow-only).
struct PackBuffers {
    std::vector<float> src;
    ColumnBlock v;
};

// The panel loop of both packers: allocates w (geometry set) with its padding bytes, then column(p, c)
// writes column c of panel p into every block of the panel, from the worker threads, and returns its
// count of non-finite blocks. Panels in parallel: the columns of a panel share bytes (int4-k's minimum
// levels, int6-k's high bits), so one thread writes a whole panel. rows_done as pack_quantized.
void pack_panels(const ExecContext& ctx, int64_t N, PackedWeight* w,
                 const std::function<int64_t(int64_t p, int64_t c, PackBuffers& b)>& column,
                 const std::function<void(int64_t n0, int64_t n1)>& rows_done) {
    const WeightFormat f = w->format;
    // Padding columns are zero bytes: q = 0 with scale 0 for int8, level 0 with scale 0 for int4-k, and
    // for int6-k q = -32 with d = 0. Only int4-sym needs its offset level 8 in every nibble (0x88), as
    // a zero nibble means q = -8.
    w->data.allocate(w->bytes(), true);
    if (f == WeightFormat::Q4)
        for (int64_t b = 0; b < w->n_panels * w->n_blocks; ++b)
            std::memset(w->data.as<uint8_t>() + b * block_bytes(f), 0x88, f16_offset(f));
    std::atomic<int64_t> nonfinite{0};
    const int64_t kChunkPanels = 256 / kCols;  // rows_done's chunk: 256 rows
    ctx.pool().parallel_for(w->n_panels, [&](int64_t p0, int64_t p1) {
        PackBuffers& buffers = ctx.pool().scratch().get<PackBuffers>();
        for (int64_t p = p0; p < p1; ++p) {
            int64_t bad = 0;
            for (int64_t c = 0; c < kCols && p * kCols + c < N; ++c) bad += column(p, c, buffers);
            if (bad) nonfinite.fetch_add(bad, std::memory_order_relaxed);
            const bool chunk_end = (p - p0 + 1) % kChunkPanels == 0 || p + 1 == p1;
            if (rows_done && chunk_end) {
                const int64_t first = p0 + (p - p0) / kChunkPanels * kChunkPanels;
                rows_done(first * kCols, std::min(N, (p + 1) * kCols));
            }
        }
    });
    w->nonfinite_blocks = nonfinite.load();
}

}  // namespace

void pack_quantized(const ExecContext& ctx, WeightFormat f, int64_t N, int64_t K,
                    const std::function<void(int64_t n, float* out)>& row, PackedWeight* w,
                    const std::function<void(int64_t n0, int64_t n1)>& rows_done) {
    GDN_CHECK(is_quantized(f), "pack_quantized: %s is not a quantized format", weight_format_name(f));
    set_quantized_shape(f, N, K, w);
    const int64_t bk = weight_block_k(f);
    pack_panels(
        ctx, N, w,
        [&](int64_t p, int64_t c, PackBuffers& b) {
            b.src.assign(w->n_blocks * bk, 0.0f);
            row(p * kCols + c, b.src.data());
            std::fill(b.src.begin() + K, b.src.end(), 0.0f);
            int64_t bad = 0;
            for (int64_t blk = 0; blk < w->n_blocks; ++blk) {
                bad += quantize_column_block(f, b.src.data() + blk * bk, K - blk * bk, &b.v);
                write_block_column(f, b.v, c, const_cast<uint8_t*>(w->quant_block(p, blk)));
            }
            return bad;
        },
        rows_done);
}

void pack_column_blocks(const ExecContext& ctx, WeightFormat f, int64_t N, int64_t K,
                        const std::function<void(int64_t n, int64_t b, ColumnBlock* out)>& block,
                        PackedWeight* w, const std::function<void(int64_t n0, int64_t n1)>& rows_done) {
    GDN_CHECK(is_quantized(f), "pack_column_blocks: %s is not a quantized format", weight_format_name(f));
    set_quantized_shape(f, N, K, w);
    pack_panels(
        ctx, N, w,
        [&](int64_t p, int64_t c, PackBuffers& b) {
            for (int64_t blk = 0; blk < w->n_blocks; ++blk) {
                block(p * kCols + c, blk, &b.v);
                write_block_column(f, b.v, c, const_cast<uint8_t*>(w->quant_block(p, blk)));
            }
            return int64_t{0};
        },
        rows_done);
}

bool find_nonfinite_scale(const PackedWeight& w, int64_t* block, uint16_t* bits) {
    const int64_t bb = block_bytes(w.format), fo = f16_offset(w.format), nf = f16_fields(w.format) * kCols;
    for (int64_t b = 0; b < w.n_panels * w.n_blocks; ++b) {
        const uint8_t* f = w.data.as<uint8_t>() + b * bb + fo;
        for (int64_t i = 0; i < nf; ++i) {
            const uint16_t h = load_f16(f + 2 * i);
            if ((h & 0x7c00u) == 0x7c00u) {
                *block = b;
                *bits = h;
                return true;
            }
        }
    }
    return false;
}

namespace {

// q of column c, k kg of the group record rec.
inline int record_q(WeightFormat f, const uint8_t* rec, int64_t c, int64_t kg) {
    switch (f) {
        case WeightFormat::Q8:
        case WeightFormat::Q8X:
            return static_cast<int8_t>(rec[q8_byte(c, kg)]);
        case WeightFormat::Q4:
            return get_nibble(rec, c, kg) - 8;
        case WeightFormat::Q4K:
            return get_nibble(rec, c, kg);
        default:
            return (get_nibble(rec, c, kg) | ((rec[q6_high_byte(c, kg)] >> q6_high_shift(c, kg)) & 3) << 4) -
                   32;
    }
}

// The group's q values of column c, with the format a constant so record_q's switch folds away.
template <WeightFormat F>
void group_q_values(const uint8_t* rec, int64_t c, int (&q)[kQuantGroup]) {
    for (int64_t kg = 0; kg < kQuantGroup; ++kg) q[kg] = record_q(F, rec, c, kg);
}

const uint8_t* group_record(const PackedWeight& w, int64_t n, int64_t g) {
    return w.quant_block(n / kCols, g * kQuantGroup / weight_block_k(w.format)) + record_offset(w.format, g);
}

}  // namespace

int q_value(const PackedWeight& w, int64_t n, int64_t k) {
    if (n >= w.N || k >= w.K) return 0;
    return record_q(w.format, group_record(w, n, k / kQuantGroup), n % kCols, k % kQuantGroup);
}

void half_affine(const PackedWeight& w, int64_t n, int64_t g, int h, float* a, float* b) {
    if (!has_half_groups(w.format)) {
        group_affine(w, n, g, a, b);
        return;
    }
    *a = *b = 0.0f;
    if (n >= w.N) return;
    if (w.format == WeightFormat::Q6K16) {
        const int64_t c = n % kCols;
        const uint8_t* blk = w.quant_block(n / kCols, g * kQuantGroup / kSuperBlock);
        const uint8_t* rec = blk + record_offset(w.format, g);
        const float d = f16_to_f32(load_f16(blk + f16_offset(w.format) + c * 2));
        *a = d * static_cast<float>(static_cast<int8_t>(rec[kQ6KScalesOffset + h * kCols + c]));
        return;
    }
    const uint8_t* blk = w.quant_block(n / kCols, g) + kQ8XScalesOffset;
    std::memcpy(a, blk + (h * kCols + n % kCols) * 4, 4);
    std::memcpy(b, blk + ((2 + h) * kCols + n % kCols) * 4, 4);
}

void group_affine(const PackedWeight& w, int64_t n, int64_t g, float* a, float* b) {
    if (has_half_groups(w.format)) {
        half_affine(w, n, g, 0, a, b);
        return;
    }
    *a = *b = 0.0f;
    if (n >= w.N) return;
    const int64_t c = n % kCols, bk = weight_block_k(w.format);
    const uint8_t* blk = w.quant_block(n / kCols, g * kQuantGroup / bk);
    const uint8_t* rec = blk + record_offset(w.format, g);
    const float d = f16_to_f32(load_f16(blk + f16_offset(w.format) + c * 2));
    switch (w.format) {
        case WeightFormat::Q8:
        case WeightFormat::Q4:
            *a = d;
            break;
        case WeightFormat::Q4K: {
            const uint8_t* lv = rec + kQ4KLevelsOffset;
            const int sc = lv[c] & 63;
            const int m = (lv[32 + c % 16] >> (c < 16 ? 0 : 4) & 15) | (lv[c] >> 6) << 4;
            *a = d * static_cast<float>(sc);
            *b = f16_to_f32(load_f16(blk + f16_offset(w.format) + kCols * 2 + c * 2)) * static_cast<float>(m);
            break;
        }
        default:
            *a = d * static_cast<float>(static_cast<int8_t>(rec[kQ6KScalesOffset + c]));
            break;
    }
}

void dequantize_row(const PackedWeight& w, int64_t n, float* out) {
    if (n >= w.N) {
        std::fill(out, out + w.K, 0.0f);
        return;
    }
    // q_value per element, with the record found once per group (an embedding gather's rows) and the
    // format's case chosen once per group: a prefill's 512 rows of 512 took 0.79 ms with the switch per
    // value, against 0.26 ms for bf16 rows.
    const int64_t c = n % kCols;
    int q[kQuantGroup];
    for (int64_t g = 0; g * kQuantGroup < w.K; ++g) {
        float a, b;
        group_affine(w, n, g, &a, &b);
        const uint8_t* rec = group_record(w, n, g);
        switch (w.format) {
            case WeightFormat::Q8:
            case WeightFormat::Q8X:
                group_q_values<WeightFormat::Q8>(rec, c, q);
                break;
            case WeightFormat::Q4:
                group_q_values<WeightFormat::Q4>(rec, c, q);
                break;
            case WeightFormat::Q4K:
                group_q_values<WeightFormat::Q4K>(rec, c, q);
                break;
            default:
                group_q_values<WeightFormat::Q6K>(rec, c, q);
                break;
        }
        const int64_t k0 = g * kQuantGroup, len = std::min<int64_t>(kQuantGroup, w.K - k0);
        for (int64_t kg = 0; kg < len; ++kg) {
            if (kg == 16 && has_half_groups(w.format)) half_affine(w, n, g, 1, &a, &b);
            out[k0 + kg] = a * static_cast<float>(q[kg]) - b;
        }
    }
}

void prefetch_row(const PackedWeight& w, int64_t n) {
    if (n >= w.N) return;
    const int64_t c = n % kCols;
    for (int64_t g = 0; g * kQuantGroup < w.K; ++g) {
        const uint8_t* blk = w.quant_block(n / kCols, g * kQuantGroup / weight_block_k(w.format));
        const uint8_t* rec = blk + record_offset(w.format, g);
        __builtin_prefetch(blk + f16_offset(w.format) + c * 2);
        for (int64_t kg = 0; kg < kQuantGroup; kg += 4)
            __builtin_prefetch(rec + (w.format == WeightFormat::Q8 || w.format == WeightFormat::Q8X
                                          ? q8_byte(c, kg)
                                          : nib_byte(c, kg)));
    }
}

void QuantizedRows::resize(int64_t m, int64_t k, ThreadPool* late_readers) {
    M = m;
    K = k;
    G = n_groups(K);
    Kp = G * kQuantGroup;
    if (late_readers) {
        grow_read_buffer(*late_readers, xq, static_cast<size_t>(M * Kp));
        grow_read_buffer(*late_readers, xs, static_cast<size_t>(M * G));
        grow_read_buffer(*late_readers, xsum, static_cast<size_t>(M * G));
        grow_read_buffer(*late_readers, xsum_lo, static_cast<size_t>(M * G));
    } else {
        xq.resize(std::max(xq.size(), static_cast<size_t>(M * Kp)));
        xs.resize(std::max(xs.size(), static_cast<size_t>(M * G)));
        xsum.resize(std::max(xsum.size(), static_cast<size_t>(M * G)));
        xsum_lo.resize(std::max(xsum_lo.size(), static_cast<size_t>(M * G)));
    }
}

void quantize_activations(const float* x, int64_t M, int64_t K, QuantizedRows* out) {
    out->resize(M, K, nullptr);
    for (int64_t m = 0; m < M; ++m) quantize_activation_row(x + m * K, out, m);
}

void quantize_activation_row(const float* xr, QuantizedRows* out, int64_t m) {
    const int64_t K = out->K;
    int8_t* q = out->xq.data() + m * out->Kp;
    for (int64_t g = 0; g < out->G; ++g) {
        const int64_t k0 = g * kQuantGroup, len = std::min<int64_t>(kQuantGroup, K - k0);
        float amax = 0.0f;
        for (int64_t i = 0; i < len; ++i) amax = std::max(amax, std::abs(xr[k0 + i]));
        const float s = amax / 127.0f;
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        int32_t sum = 0;
        for (int64_t i = 0; i < kQuantGroup; ++i) {
            // NaN (an inf activation times inv = 0) maps to INT_MIN as vcvtps2dq does, so -127 after the
            // clamp; |x * inv| <= 127 otherwise.
            const float r = i < len ? xr[k0 + i] * inv : 0.0f;
            const int v = std::isnan(r) ? INT32_MIN : static_cast<int>(std::nearbyint(r));
            const int c = std::clamp(v, -127, 127);
            q[k0 + i] = static_cast<int8_t>(c);
            sum += c;
        }
        out->xs[m * out->G + g] = s;
        out->xsum[m * out->G + g] = sum;
    }
    sum_low_halves(out, m);
}

void sum_low_halves(QuantizedRows* out, int64_t m) {
    const int8_t* q = out->xq.data() + m * out->Kp;
    int32_t* lo = out->xsum_lo.data() + m * out->G;
    for (int64_t g = 0; g < out->G; ++g) {
        int32_t s = 0;
        for (int64_t i = 0; i < 16; ++i) s += q[g * kQuantGroup + i];
        lo[g] = s;
    }
}

}  // namespace gdn::quant
