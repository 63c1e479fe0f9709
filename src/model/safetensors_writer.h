// Writes a .safetensors file: header JSON (8-byte aligned, space padded), then tensors back to back
// with no holes, F32 tensors first so every tensor is aligned to its element size (as the safetensors
// library itself orders them). Tensor data is produced one tensor at a time by a callback, so writing a
// multi-GB checkpoint needs memory for one tensor only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace gdn {

class SafetensorsWriter {
  public:
    // fill(dst, numel) writes numel f32 values; they are converted to `dtype` on write.
    using Fill = std::function<void(float* dst, int64_t numel)>;
    void add(std::string name, DType dtype, std::vector<int64_t> shape, Fill fill);
    // fill(dst, bytes) writes the tensor's bytes as they are stored (any dtype; U8 for packed weights).
    using RawFill = std::function<void(uint8_t* dst, uint64_t bytes)>;
    void add_raw(std::string name, DType dtype, std::vector<int64_t> shape, RawFill fill);
    // An entry of the header's __metadata__ ("format": "pt" is always there).
    void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
    size_t n_tensors() const { return tensors_.size(); }
    uint64_t data_bytes() const;
    // Tensor names in write order with their byte sizes (for shard planning).
    std::vector<std::pair<std::string, uint64_t>> sizes() const;
    // Drops every tensor whose name fails `keep` (used to split one writer into shards).
    void keep_only(const std::function<bool(const std::string&)>& keep);
    Status write(const std::string& path) const;

  private:
    struct Pending {
        std::string name;
        DType dtype;
        std::vector<int64_t> shape;
        Fill fill;
        RawFill raw;  // set instead of fill for add_raw
        uint64_t numel() const;
    };
    std::vector<Pending> ordered() const;
    std::vector<Pending> tensors_;
    std::map<std::string, std::string> metadata_;
};

}  // namespace gdn
