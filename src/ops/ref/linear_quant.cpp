// The scalar definition of a quantized linear (ops/quant/quant_format.h), read element by element
// through q_value / q_scale: the reference every fast quantized kernel is tested against.
#include <cstdint>

#include "ops/linear.h"
#include "ops/ref/ref_ops.h"

namespace gdn::ref {

void linear_quant(const quant::QuantizedRows& x, const PackedWeight& w, float* y, int64_t ldy) {
    for (int64_t m = 0; m < x.M; ++m)
        for (int64_t n = 0; n < w.N; ++n) {
            float acc = 0.0f;
            for (int64_t g = 0; g < w.n_groups; ++g) {
                int32_t d = 0;
                for (int64_t k = g * kQuantGroup; k < (g + 1) * kQuantGroup; ++k)
                    d += quant::q_value(w, n, k) * x.row(m)[k];
                acc += (quant::q_scale(w, n, g) * x.xs[m * x.G + g]) * static_cast<float>(d);
            }
            y[m * ldy + n] = acc;
        }
}

}  // namespace gdn::ref
