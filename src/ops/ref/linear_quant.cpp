// The scalar definition of a quantized linear (ops/quant/quant_format.h), read element by element
// through q_value / group_affine: the reference every fast quantized kernel is tested against.
#include <algorithm>
#include <cstdint>

#include "ops/linear.h"
#include "ops/ref/ref_ops.h"

namespace gdn::ref {

void linear_quant(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy, int64_t n0,
                  int64_t n1) {
    if (n1 < 0) n1 = w.N;
    for (int64_t m = 0; m < x.M; ++m)
        for (int64_t n = n0; n < std::min(n1, w.N); ++n) {
            float acc = 0.0f;
            for (int64_t g = 0; g < x.G; ++g) {
                const int64_t i = m * x.G + g;
                if (has_half_groups(w.format)) {  // per half: its own D, S and affine map
                    float part = 0.0f;
                    for (int h = 0; h < 2; ++h) {
                        int32_t d = 0;
                        for (int64_t k = g * kQuantGroup + 16 * h; k < g * kQuantGroup + 16 * h + 16; ++k)
                            d += quant::q_value(w, n, k) * x.row(m)[k];
                        const int32_t s = h == 0 ? x.xsum_lo[i] : x.xsum[i] - x.xsum_lo[i];
                        float a, b;
                        quant::half_affine(w, n, g, h, &a, &b);
                        part += a * static_cast<float>(d) - b * static_cast<float>(s);
                    }
                    acc += x.xs[i] * part;
                    continue;
                }
                int32_t d = 0;
                for (int64_t k = g * kQuantGroup; k < (g + 1) * kQuantGroup; ++k)
                    d += quant::q_value(w, n, k) * x.row(m)[k];
                float a, b;
                quant::group_affine(w, n, g, &a, &b);
                acc += x.xs[i] * (a * static_cast<float>(d) - b * static_cast<float>(x.xsum[i]));
            }
            y[m * ldy + n] = acc;
        }
}

}  // namespace gdn::ref
