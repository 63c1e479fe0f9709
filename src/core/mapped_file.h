// A file mapped read-only into memory (private, so nothing is ever written back), unmapped when the
// object goes. An empty file is an empty span at a valid address. What the safetensors and GGUF readers
// read their bytes through; their tensors are views into it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace gdn {

class MappedFile {
  public:
    static Result<MappedFile> open(const std::string& path);
    MappedFile() = default;
    ~MappedFile();
    MappedFile(MappedFile&& o) noexcept;
    MappedFile& operator=(MappedFile&& o) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const uint8_t* data() const;  // never null
    size_t size() const { return size_; }
    // p lies inside the mapping (an empty file maps nothing).
    bool contains(const void* p) const {
        return map_ && p >= map_ && static_cast<const char*>(p) < static_cast<const char*>(map_) + size_;
    }

  private:
    void* map_ = nullptr;
    size_t size_ = 0;
};

}  // namespace gdn
