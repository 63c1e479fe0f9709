#include "model/gguf_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>

#include "core/log.h"

namespace gdn {

namespace {

constexpr int kMaxDims = 4;  // GGML_MAX_DIMS
constexpr uint64_t kMaxAlignment = 1u << 20;

// Bytes of one scalar element of a metadata type (0: not a scalar).
uint64_t scalar_bytes(uint32_t t) {
    switch (t) {
        case GgufValue::UINT8:
        case GgufValue::INT8:
        case GgufValue::BOOL:
            return 1;
        case GgufValue::UINT16:
        case GgufValue::INT16:
            return 2;
        case GgufValue::UINT32:
        case GgufValue::INT32:
        case GgufValue::FLOAT32:
            return 4;
        case GgufValue::UINT64:
        case GgufValue::INT64:
        case GgufValue::FLOAT64:
            return 8;
        default:
            return 0;
    }
}

// A bounds-checked little-endian cursor over the file: every read says what it was reading when it
// runs past the end.
class Cursor {
  public:
    Cursor(const uint8_t* base, size_t size, const std::string& path)
        : base_(base), size_(size), path_(path) {}
    uint64_t pos() const { return pos_; }
    uint64_t left() const { return size_ - pos_; }
    template <class T>
    Status read(T* out, const char* what) {
        if (left() < sizeof(T)) return past_end(what, sizeof(T));
        std::memcpy(out, base_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return Status::ok();
    }
    // A GGUF string: u64 length, bytes. `view` points into the file.
    Status string(std::string_view* view, const char* what) {
        uint64_t n = 0;
        GDN_RETURN_IF_ERROR(read(&n, what));
        if (n > left()) return past_end(what, n);
        *view = std::string_view(reinterpret_cast<const char*>(base_ + pos_), n);
        pos_ += n;
        return Status::ok();
    }
    Status skip(uint64_t n, const char* what) {
        if (n > left()) return past_end(what, n);
        pos_ += n;
        return Status::ok();
    }
    const uint8_t* here() const { return base_ + pos_; }
    Status error(const std::string& what) const {
        return Status::error(strprintf("%s: %s (at byte %llu)", path_.c_str(), what.c_str(),
                                       static_cast<unsigned long long>(pos_)));
    }

  private:
    Status past_end(const char* what, uint64_t n) const {
        return error(strprintf("%s needs %llu bytes but the file has %llu left: truncated or not a GGUF file",
                               what, static_cast<unsigned long long>(n),
                               static_cast<unsigned long long>(left())));
    }
    const uint8_t* base_;
    uint64_t size_, pos_ = 0;
    const std::string& path_;
};

// Reads one metadata value of type t at the cursor (arrays: their elements, which may not be arrays).
Status read_value(Cursor& c, uint32_t t, std::string_view key, GgufValue* v) {
    v->type = static_cast<GgufValue::Type>(t);
    if (const uint64_t n = scalar_bytes(t)) {
        v->at = c.here();
        return c.skip(n, "a metadata value");
    }
    if (t == GgufValue::STRING) {
        std::string_view s;
        GDN_RETURN_IF_ERROR(c.string(&s, "a metadata string"));
        v->at = reinterpret_cast<const uint8_t*>(s.data());
        v->bytes = s.size();
        return Status::ok();
    }
    if (t != GgufValue::ARRAY)
        return c.error(strprintf("metadata key '%.*s' has unknown value type %u",
                                 static_cast<int>(key.size()), key.data(), t));
    uint32_t et = 0;
    GDN_RETURN_IF_ERROR(c.read(&et, "an array's element type"));
    GDN_RETURN_IF_ERROR(c.read(&v->count, "an array's length"));
    v->elem_type = static_cast<GgufValue::Type>(et);
    v->at = c.here();
    if (const uint64_t n = scalar_bytes(et)) {
        if (v->count > c.left() / n)
            return c.error(strprintf("array '%.*s' of %llu elements runs past the end of the file",
                                     static_cast<int>(key.size()), key.data(),
                                     static_cast<unsigned long long>(v->count)));
        return c.skip(v->count * n, "an array");
    }
    if (et != GgufValue::STRING)
        return c.error(strprintf("metadata key '%.*s' is an array of %s, which is not supported",
                                 static_cast<int>(key.size()), key.data(), GgufValue::type_name(et)));
    if (v->count > c.left() / 8)  // each string takes at least its length
        return c.error(strprintf("array '%.*s' of %llu strings runs past the end of the file",
                                 static_cast<int>(key.size()), key.data(),
                                 static_cast<unsigned long long>(v->count)));
    for (uint64_t i = 0; i < v->count; ++i) {
        std::string_view s;
        GDN_RETURN_IF_ERROR(c.string(&s, "an array's string"));
    }
    return Status::ok();
}

int64_t scalar_int(const GgufValue& v, const uint8_t* at, bool* fits) {
    *fits = true;
    auto get = [&](auto x) {
        std::memcpy(&x, at, sizeof(x));
        return x;
    };
    switch (v.type == GgufValue::ARRAY ? v.elem_type : v.type) {
        case GgufValue::UINT8:
            return get(uint8_t{});
        case GgufValue::INT8:
            return get(int8_t{});
        case GgufValue::UINT16:
            return get(uint16_t{});
        case GgufValue::INT16:
            return get(int16_t{});
        case GgufValue::UINT32:
            return get(uint32_t{});
        case GgufValue::INT32:
            return get(int32_t{});
        case GgufValue::INT64:
            return get(int64_t{});
        case GgufValue::UINT64: {
            const uint64_t u = get(uint64_t{});
            *fits = u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
            return static_cast<int64_t>(u);
        }
        default:
            *fits = false;
            return 0;
    }
}

}  // namespace

const char* GgufValue::type_name(uint32_t t) {
    static const char* names[] = {"uint8", "int8",   "uint16", "int16",  "uint32", "int32",  "float32",
                                  "bool",  "string", "array",  "uint64", "int64",  "float64"};
    return t < sizeof(names) / sizeof(names[0]) ? names[t] : "an unknown type";
}

int64_t GgufFile::Tensor::elements() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
}

Result<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path) {
    std::unique_ptr<GgufFile> f(new GgufFile());
    f->path_ = path;
    GDN_ASSIGN_OR_RETURN(f->map_, MappedFile::open(path));
    f->base_ = f->map_.data();
    f->size_ = f->map_.size();
    GDN_RETURN_IF_ERROR(f->parse_all());
    return f;
}

Result<std::unique_ptr<GgufFile>> GgufFile::parse(const uint8_t* data, size_t size, std::string name) {
    std::unique_ptr<GgufFile> f(new GgufFile());
    f->path_ = std::move(name);
    static const uint8_t kEmpty[1] = {0};
    f->base_ = data ? data : kEmpty;
    f->size_ = size;
    GDN_RETURN_IF_ERROR(f->parse_all());
    return f;
}

GgufFile::~GgufFile() = default;

Status GgufFile::parse_all() {
    Cursor c(base_, size_, path_);
    uint32_t magic = 0;
    GDN_RETURN_IF_ERROR(c.read(&magic, "the magic"));
    if (std::memcmp(&magic, "GGUF", 4) != 0) return Status::error(path_ + ": not a GGUF file (bad magic)");
    GDN_RETURN_IF_ERROR(c.read(&version_, "the version"));
    if (version_ != 2 && version_ != 3)
        return Status::error(
            strprintf("%s: GGUF version %u is not supported (2 and 3 are)", path_.c_str(), version_));
    uint64_t n_tensors = 0, n_kv = 0;
    GDN_RETURN_IF_ERROR(c.read(&n_tensors, "the tensor count"));
    GDN_RETURN_IF_ERROR(c.read(&n_kv, "the metadata count"));
    // A key/value takes at least 13 bytes, a tensor info 28: counts beyond what the file can hold are
    // refused before anything is sized by them.
    if (n_kv > c.left() / 13 || n_tensors > c.left() / 28)
        return c.error(strprintf("%llu tensors and %llu metadata keys cannot fit in the file",
                                 static_cast<unsigned long long>(n_tensors),
                                 static_cast<unsigned long long>(n_kv)));
    for (uint64_t i = 0; i < n_kv; ++i) {
        std::string_view key;
        GDN_RETURN_IF_ERROR(c.string(&key, "a metadata key"));
        uint32_t t = 0;
        GDN_RETURN_IF_ERROR(c.read(&t, "a metadata value type"));
        GgufValue v;
        GDN_RETURN_IF_ERROR(read_value(c, t, key, &v));
        if (!kv_.emplace(std::string(key), v).second)
            return c.error("metadata key '" + std::string(key) + "' appears twice");
    }
    if (const GgufValue* a = find("general.alignment")) {
        auto al = get_int("general.alignment");
        if (!al || a->type != GgufValue::UINT32 || *al <= 0 || (*al & (*al - 1)) != 0 ||
            static_cast<uint64_t>(*al) > kMaxAlignment)
            return Status::error(path_ + ": general.alignment must be a uint32 power of two up to 1 MiB");
        alignment_ = static_cast<uint64_t>(*al);
    }
    tensors_.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
        Tensor t;
        std::string_view name;
        GDN_RETURN_IF_ERROR(c.string(&name, "a tensor name"));
        t.name = std::string(name);
        auto fail = [&](const std::string& what) { return c.error("tensor '" + t.name + "': " + what); };
        uint32_t n_dims = 0, type = 0;
        GDN_RETURN_IF_ERROR(c.read(&n_dims, "a tensor's dimension count"));
        if (n_dims < 1 || n_dims > kMaxDims)
            return fail(strprintf("%u dimensions (1 to %d are allowed)", n_dims, kMaxDims));
        int64_t elements = 1;
        for (uint32_t d = 0; d < n_dims; ++d) {
            uint64_t ne = 0;
            GDN_RETURN_IF_ERROR(c.read(&ne, "a tensor dimension"));
            if (ne < 1 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max() / elements))
                return fail(strprintf("dimension %u is %llu: the element count is 0 or overflows", d,
                                      static_cast<unsigned long long>(ne)));
            t.dims.push_back(static_cast<int64_t>(ne));
            elements *= static_cast<int64_t>(ne);
        }
        GDN_RETURN_IF_ERROR(c.read(&type, "a tensor type"));
        t.type = ggml_type_info(type);
        if (!t.type) return fail(strprintf("unknown ggml type %u", type));
        if (t.dims[0] % t.type->block_elems != 0)
            return fail(strprintf("rows of %lld values are not whole %s blocks of %lld",
                                  static_cast<long long>(t.dims[0]), t.type->name,
                                  static_cast<long long>(t.type->block_elems)));
        GDN_RETURN_IF_ERROR(c.read(&t.offset, "a tensor offset"));
        if (t.offset % alignment_ != 0)
            return fail(strprintf("offset %llu is not a multiple of the alignment %llu",
                                  static_cast<unsigned long long>(t.offset),
                                  static_cast<unsigned long long>(alignment_)));
        t.bytes = static_cast<uint64_t>(elements / t.type->block_elems) *
                  static_cast<uint64_t>(t.type->block_bytes);
        if (!by_name_.emplace(t.name, tensors_.size()).second) return fail("the name appears twice");
        tensors_.push_back(std::move(t));
    }
    // The data section starts at the next multiple of the alignment.
    const uint64_t data_start = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
    if (data_start > size_ && !tensors_.empty())
        return Status::error(path_ + ": the data section starts past the end of the file: truncated");
    const uint64_t data_size = data_start <= size_ ? size_ - data_start : 0;
    std::vector<const Tensor*> by_offset;
    for (Tensor& t : tensors_) {
        if (t.offset > data_size || t.bytes > data_size - t.offset)
            return Status::error(strprintf(
                "%s: tensor '%s' (%s, %llu bytes at data offset %llu) runs past the end "
                "of the file: truncated",
                path_.c_str(), t.name.c_str(), t.type->name, static_cast<unsigned long long>(t.bytes),
                static_cast<unsigned long long>(t.offset)));
        t.data = base_ + data_start + t.offset;
        by_offset.push_back(&t);
    }
    std::sort(by_offset.begin(), by_offset.end(),
              [](const Tensor* a, const Tensor* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i)
        if (by_offset[i - 1]->offset + by_offset[i - 1]->bytes > by_offset[i]->offset)
            return Status::error(strprintf("%s: tensors '%s' and '%s' overlap in the file", path_.c_str(),
                                           by_offset[i - 1]->name.c_str(), by_offset[i]->name.c_str()));
    return Status::ok();
}

const GgufValue* GgufFile::find(std::string_view key) const {
    auto it = kv_.find(key);
    return it == kv_.end() ? nullptr : &it->second;
}

const GgufFile::Tensor* GgufFile::tensor(std::string_view name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

namespace {
Status wrong_type(const std::string& path, std::string_view key, const char* want, const GgufValue& v) {
    std::string is = GgufValue::type_name(v.type);
    if (v.type == GgufValue::ARRAY) is = std::string("an array of ") + GgufValue::type_name(v.elem_type);
    return Status::error(strprintf("%s: metadata '%.*s' must be %s, but is %s", path.c_str(),
                                   static_cast<int>(key.size()), key.data(), want, is.c_str()));
}
}  // namespace

#define GDN_GGUF_LOOKUP(key)                                                            \
    const GgufValue* v = find(key);                                                     \
    if (!v)                                                                             \
        return Status::error(strprintf("%s: metadata '%.*s' is missing", path_.c_str(), \
                                       static_cast<int>((key).size()), (key).data()));

Result<std::string> GgufFile::get_string(std::string_view key) const {
    GDN_GGUF_LOOKUP(key);
    if (v->type != GgufValue::STRING) return wrong_type(path_, key, "a string", *v);
    return std::string(reinterpret_cast<const char*>(v->at), v->bytes);
}

Result<int64_t> GgufFile::get_int(std::string_view key) const {
    GDN_GGUF_LOOKUP(key);
    bool fits = false;
    const int64_t x = v->is_integer() ? scalar_int(*v, v->at, &fits) : 0;
    if (!fits) return wrong_type(path_, key, "an integer (within int64)", *v);
    return x;
}

Result<double> GgufFile::get_float(std::string_view key) const {
    GDN_GGUF_LOOKUP(key);
    if (v->type == GgufValue::FLOAT32) {
        float f;
        std::memcpy(&f, v->at, 4);
        return static_cast<double>(f);
    }
    if (v->type == GgufValue::FLOAT64) {
        double d;
        std::memcpy(&d, v->at, 8);
        return d;
    }
    if (v->is_integer()) {
        bool fits = false;
        const int64_t x = scalar_int(*v, v->at, &fits);
        if (fits) return static_cast<double>(x);
    }
    return wrong_type(path_, key, "a number", *v);
}

Result<bool> GgufFile::get_bool(std::string_view key) const {
    GDN_GGUF_LOOKUP(key);
    if (v->type != GgufValue::BOOL) return wrong_type(path_, key, "a bool", *v);
    return *v->at != 0;
}

Result<std::vector<std::string_view>> GgufFile::get_strings(std::string_view key) const {
    GDN_GGUF_LOOKUP(key);
    if (v->type != GgufValue::ARRAY || v->elem_type != GgufValue::STRING)
        return wrong_type(path_, key, "an array of strings", *v);
    std::vector<std::string_view> out;
    out.reserve(v->count);
    const uint8_t* p = v->at;
    for (uint64_t i = 0; i < v->count; ++i) {  // bounds were checked when the file was parsed
        uint64_t n = 0;
        std::memcpy(&n, p, 8);
        out.emplace_back(reinterpret_cast<const char*>(p + 8), n);
        p += 8 + n;
    }
    return out;
}

Result<std::vector<int64_t>> GgufFile::get_ints(std::string_view key) const {
    GDN_GGUF_LOOKUP(key);
    const uint64_t n = scalar_bytes(v->elem_type);
    if (v->type != GgufValue::ARRAY || n == 0 || v->elem_type == GgufValue::FLOAT32 ||
        v->elem_type == GgufValue::FLOAT64 || v->elem_type == GgufValue::BOOL)
        return wrong_type(path_, key, "an array of integers", *v);
    std::vector<int64_t> out(v->count);
    for (uint64_t i = 0; i < v->count; ++i) {
        bool fits = false;
        out[i] = scalar_int(*v, v->at + i * n, &fits);
        if (!fits) return wrong_type(path_, key, "an array of integers within int64", *v);
    }
    return out;
}

Result<std::vector<float>> GgufFile::get_floats(std::string_view key) const {
    GDN_GGUF_LOOKUP(key);
    if (v->type != GgufValue::ARRAY || v->elem_type != GgufValue::FLOAT32)
        return wrong_type(path_, key, "an array of float32", *v);
    std::vector<float> out(v->count);
    if (v->count) std::memcpy(out.data(), v->at, v->count * 4);
    return out;
}

#undef GDN_GGUF_LOOKUP

bool is_gguf_path(const std::string& path) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
    std::ifstream f(path, std::ios::binary);
    char magic[4] = {};
    return f.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace gdn
