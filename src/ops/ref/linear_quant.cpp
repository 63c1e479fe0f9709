// The scalar definition of a quantized linear (ops/quant/quant_format.h), read element by element
// through q_value / group_affine: the reference every fast quantized kernel is tested against.
#include <cstdint>

#include "ops/linear.h"
#include "ops/ref/ref_ops.h"

namespace gdn::ref {

void linear_quant(const quant::QuantRowsView& x, const PackedWeight& w, float* y, int64_t ldy) {
    for (int64_t m = 0; m < x.M; ++m)
        for (int64_t n = 0; n < w.N; ++n) {
            float acc = 0.0f;
            for (int64_t g = 0; g < x.G; ++g) {
                int32_t d = 0;
                for (int64_t k = g * kQuantGroup; k < (g + 1) * kQuantGroup; ++k)
                    d += quant::q_value(w, n, k) * x.row(m)[k];
                float a, b;
                quant::group_affine(w, n, g, &a, &b);
                const int64_t i = m * x.G + g;
                acc += x.xs[i] * (a * static_cast<float>(d) - b * static_cast<float>(x.xsum[i]));
            }
            y[m * ldy + n] = acc;
        }
}

}  // namespace gdn::ref
