// Wall time for measurements: seconds on the monotonic clock (differences only; the origin is arbitrary).
#pragma once

#include <chrono>

namespace gdn {

inline double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace gdn
