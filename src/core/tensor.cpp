#include "core/tensor.h"

namespace gdn {

std::string TensorView::shape_str() const {
    std::string s = "[";
    for (int i = 0; i < rank; ++i) {
        if (i) s += ", ";
        s += std::to_string(shape[i]);
    }
    return s + "]";
}

}  // namespace gdn
