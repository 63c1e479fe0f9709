// GGUF reader (llama.cpp's model file format, versions 2 and 3): the header, the metadata key/values and
// the tensor table of one mmapped file, every count, length and offset checked against the file before it
// is used, so a truncated, corrupt or hostile file is an error that says what was wrong, never a crash or
// a read out of bounds. Tensor data is not touched here: a tensor is a typed span of the mapping.
//
// Layout (all little-endian): "GGUF", u32 version, u64 tensor count, u64 key/value count; the key/values
// (a string key, a u32 value type, the value); the tensor infos (a string name, u32 n_dims, n_dims u64
// dims with the contiguous one first, u32 ggml type, u64 offset into the data section); padding to
// `general.alignment` (32 unless set); the data section. A string is a u64 length and its bytes; an
// array is a u32 element type, a u64 count and the elements.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped_file.h"
#include "core/status.h"
#include "ops/quant/ggml_types.h"

namespace gdn {

// A metadata value. Scalars are widened to the getters' types; strings and arrays point into the mapping.
struct GgufValue {
    enum Type : uint32_t {
        UINT8 = 0,
        INT8 = 1,
        UINT16 = 2,
        INT16 = 3,
        UINT32 = 4,
        INT32 = 5,
        FLOAT32 = 6,
        BOOL = 7,
        STRING = 8,
        ARRAY = 9,
        UINT64 = 10,
        INT64 = 11,
        FLOAT64 = 12,
    };
    Type type = UINT8;
    Type elem_type = UINT8;       // arrays: the elements' type (never ARRAY: nested arrays are refused)
    uint64_t count = 0;           // arrays: the number of elements
    const uint8_t* at = nullptr;  // the value's bytes (a string's first byte; an array's first element)
    uint64_t bytes = 0;           // strings: the length
    static const char* type_name(uint32_t t);
    bool is_integer() const { return type <= INT32 || type == UINT64 || type == INT64; }
};

// A regular file that starts with the GGUF magic (what --model takes besides a checkpoint folder).
bool is_gguf_path(const std::string& path);

class GgufFile {
  public:
    struct Tensor {
        std::string name;
        std::vector<int64_t> dims;  // ne0 (the contiguous row length) first, as in the file
        const GgmlTypeInfo* type = nullptr;
        uint64_t offset = 0;  // in the data section
        uint64_t bytes = 0;
        const uint8_t* data = nullptr;  // into the mapping
        int64_t elements() const;
    };

    // Maps and parses `path`.
    static Result<std::unique_ptr<GgufFile>> open(const std::string& path);
    // Parses `size` bytes at `data` (kept by the caller while the GgufFile lives): tests and the fuzzer.
    static Result<std::unique_ptr<GgufFile>> parse(const uint8_t* data, size_t size, std::string name);
    ~GgufFile();
    GgufFile(const GgufFile&) = delete;
    GgufFile& operator=(const GgufFile&) = delete;

    const std::string& path() const { return path_; }
    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    size_t file_size() const { return size_; }
    // p lies inside the file's bytes.
    bool maps(const void* p) const { return p >= base_ && static_cast<const uint8_t*>(p) < base_ + size_; }

    // Metadata, by key (null: absent).
    const GgufValue* find(std::string_view key) const;
    const std::map<std::string, GgufValue, std::less<>>& metadata() const { return kv_; }
    // Typed reads of a key that must be there: an error names the key and what it is instead.
    Result<std::string> get_string(std::string_view key) const;
    Result<int64_t> get_int(std::string_view key) const;   // any integer type whose value fits int64
    Result<double> get_float(std::string_view key) const;  // FLOAT32 / FLOAT64 (or an integer)
    Result<bool> get_bool(std::string_view key) const;
    // An array's elements; an error when the key is absent, not an array, or of other elements.
    Result<std::vector<std::string_view>> get_strings(std::string_view key) const;
    Result<std::vector<int64_t>> get_ints(std::string_view key) const;
    Result<std::vector<float>> get_floats(std::string_view key) const;

    const std::vector<Tensor>& tensors() const { return tensors_; }
    const Tensor* tensor(std::string_view name) const;

  private:
    GgufFile() = default;
    Status parse_all();
    std::string path_;
    MappedFile map_;  // open()'s mapping; empty for parse()
    const uint8_t* base_ = nullptr;
    size_t size_ = 0;
    uint32_t version_ = 0;
    uint64_t alignment_ = 32;
    std::map<std::string, GgufValue, std::less<>> kv_;
    std::vector<Tensor> tensors_;
    std::map<std::string, size_t, std::less<>> by_name_;
};

}  // namespace gdn
