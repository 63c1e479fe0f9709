// Where a tensor's memory lives. Host memory only for now: every Buffer, mapping and view is host memory
// the CPU kernels read directly. A device backend adds its kind here, allocates its Buffers there, and its
// ops check the space of what they are handed (a host view given to a device kernel is a bug, not a copy).
#pragma once

#include <cstdint>

namespace gdn {

enum class MemorySpace : uint8_t { HOST };

inline const char* memory_space_name(MemorySpace s) {
    switch (s) {
        case MemorySpace::HOST:
            return "host";
    }
    return "?";
}

}  // namespace gdn
