#include "model/checkpoint.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "core/log.h"
#include "model/gguf_file.h"
#include "util/json_file.h"

namespace gdn {

namespace {
// The format caps the header at 100 MB; anything larger is corruption.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
}  // namespace

Result<std::vector<SafetensorsFile::Entry>> parse_safetensors_header(
    const uint8_t* base, size_t file_size, const std::string& path,
    std::map<std::string, std::string>* metadata) {
    if (file_size < 8)
        return Status::error(
            strprintf("%s: truncated safetensors file (%zu bytes; the 8-byte header length is "
                      "missing)",
                      path.c_str(), file_size));
    uint64_t header_len = 0;
    std::memcpy(&header_len, base, 8);  // little-endian u64
    if (header_len > kMaxHeaderBytes || header_len > file_size - 8)
        return Status::error(
            strprintf("%s: header length %llu runs past the end of the file (%zu bytes): "
                      "truncated or not a safetensors file",
                      path.c_str(), static_cast<unsigned long long>(header_len), file_size));
    std::string text(reinterpret_cast<const char*>(base) + 8, header_len);
    GDN_ASSIGN_OR_RETURN(SortedJson header, parse_json_sorted(text, path + " (safetensors header)"));
    if (!header.is_object()) return Status::error(path + ": safetensors header is not a JSON object");

    const uint64_t data_start = 8 + header_len;
    const uint64_t data_size = file_size - data_start;
    std::vector<SafetensorsFile::Entry> entries;
    for (auto it = header.begin(); it != header.end(); ++it) {
        if (it.key() ==
            "__metadata__") {  // free text, strings to strings; other writers' non-strings are kept out
            if (it.value().is_object())
                for (auto m = it.value().begin(); m != it.value().end(); ++m)
                    if (metadata && m.value().is_string())
                        (*metadata)[m.key()] = m.value().get<std::string>();
            continue;
        }
        const std::string& name = it.key();
        const SortedJson& e = it.value();
        auto fail = [&](const std::string& what) {
            return Status::error(strprintf("%s: tensor '%s': %s", path.c_str(), name.c_str(), what.c_str()));
        };
        if (!e.is_object()) return fail("entry is not a JSON object");
        auto dt = e.find("dtype");
        auto sh = e.find("shape");
        auto off = e.find("data_offsets");
        if (dt == e.end() || !dt->is_string()) return fail("missing 'dtype'");
        if (sh == e.end() || !sh->is_array()) return fail("missing 'shape'");
        if (off == e.end() || !off->is_array() || off->size() != 2)
            return fail("missing 'data_offsets' [begin, end]");
        DType dtype;
        std::string dts = dt->get<std::string>();
        if (dts == "U8")
            dtype = DType::U8;  // packed weights (model/packed_checkpoint.h)
        else if (!parse_dtype(dts, &dtype) || (dts != "F32" && dts != "BF16" && dts != "F16"))
            return fail("unknown or unsupported dtype '" + dts + "' (supported: F32, BF16, F16, U8)");
        if (sh->size() > 8) return fail(strprintf("rank %zu is not supported (at most 8)", sh->size()));
        SafetensorsFile::Entry entry;
        entry.name = name;
        TensorView& v = entry.view;
        v.dtype = dtype;
        // Ranks above 4 (e.g. vision conv kernels) fold their leading dims into dim 0.
        const int rank = static_cast<int>(sh->size());
        const int fold = rank > 4 ? rank - 3 : 1;
        v.rank = rank > 4 ? 4 : rank;
        uint64_t numel = 1;
        for (int d = 0; d < rank; ++d) {
            const SortedJson& x = (*sh)[d];
            if (!x.is_number_unsigned() && !(x.is_number_integer() && x.get<int64_t>() >= 0))
                return fail("shape entries must be non-negative integers");
            uint64_t n = x.get<uint64_t>();
            if (n > (1ull << 40) || (n && numel > (1ull << 62) / n)) return fail("shape is too large");
            const int vd = d < fold ? 0 : d - fold + 1;
            v.shape[vd] =
                (d > 0 && d < fold) ? v.shape[0] * static_cast<int64_t>(n) : static_cast<int64_t>(n);
            numel *= n;
        }
        if (v.rank == 0) v.rank = 1;  // scalar: treat as [1]
        int64_t s = 1;
        for (int d = v.rank - 1; d >= 0; --d) {
            v.stride[d] = s;
            s *= v.shape[d];
        }
        for (const auto& x : *off)
            if (!x.is_number_unsigned() && !(x.is_number_integer() && x.get<int64_t>() >= 0))
                return fail("data_offsets must be non-negative integers");
        entry.begin = (*off)[0].get<uint64_t>();
        entry.end = (*off)[1].get<uint64_t>();
        if (entry.begin > entry.end) return fail("data_offsets begin > end");
        if (entry.end > data_size)
            return fail(strprintf(
                "data [%llu, %llu) lies outside the file's %llu data bytes (truncated file?)",
                static_cast<unsigned long long>(entry.begin), static_cast<unsigned long long>(entry.end),
                static_cast<unsigned long long>(data_size)));
        uint64_t want = numel * dtype_size(dtype);
        if (entry.end - entry.begin != want)
            return fail(strprintf("shape %s x %s needs %llu bytes but data_offsets span %llu bytes",
                                  v.shape_str().c_str(), dts.c_str(), static_cast<unsigned long long>(want),
                                  static_cast<unsigned long long>(entry.end - entry.begin)));
        v.data = const_cast<uint8_t*>(base) + data_start + entry.begin;
        entries.push_back(std::move(entry));
    }
    // No two tensors may share bytes.
    std::vector<const SafetensorsFile::Entry*> sorted;
    for (const auto& e : entries) sorted.push_back(&e);
    std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
    for (size_t i = 1; i < sorted.size(); ++i)
        if (sorted[i]->begin < sorted[i - 1]->end && sorted[i]->begin != sorted[i]->end &&
            sorted[i - 1]->begin != sorted[i - 1]->end)
            return Status::error(strprintf("%s: tensors '%s' and '%s' overlap in the data section",
                                           path.c_str(), sorted[i - 1]->name.c_str(),
                                           sorted[i]->name.c_str()));
    return entries;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
    std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
    f->path_ = path;
    GDN_ASSIGN_OR_RETURN(f->map_, MappedFile::open(path));
    GDN_ASSIGN_OR_RETURN(f->entries_,
                         parse_safetensors_header(f->map_.data(), f->map_.size(), path, &f->metadata_));
    size_t moved = 0;
    for (Entry& e : f->entries_) {
        const size_t align = dtype_size(e.view.dtype), bytes = e.end - e.begin;
        if (reinterpret_cast<uintptr_t>(e.view.data) % align == 0 || bytes == 0) continue;
        Buffer& b = f->realigned_.emplace_back(bytes, false);
        std::memcpy(b.data(), e.view.data, bytes);
        e.view.data = b.data();
        moved += bytes;
    }
    if (moved)
        GDN_LOG_WARN(
            "%s: %zu tensors (%.1f MiB) are not aligned to their element size in the file (header length "
            "not a multiple of 8?): copied to aligned memory",
            path.c_str(), f->realigned_.size(), moved / 1048576.0);
    return f;
}

SafetensorsFile::~SafetensorsFile() = default;

bool canonical_tensor_name(const std::string& stored, std::string* canonical) {
    auto starts = [&](const char* p) { return stored.rfind(p, 0) == 0; };
    if (starts("model.visual.") || starts("visual.")) return false;
    if (starts("model.language_model."))
        *canonical = stored.substr(21);
    else if (starts("model."))
        *canonical = stored.substr(6);
    else
        *canonical = stored;
    return true;
}

Result<Checkpoint> Checkpoint::open(const std::string& dir) {
    Checkpoint ck;
    ck.dir_ = dir;
    std::string index_path = dir + "/model.safetensors.index.json";
    std::string single_path = dir + "/model.safetensors";
    // name -> shard the index says holds it (empty for a single file)
    std::map<std::string, std::string> expected;
    std::vector<std::string> shard_names;
    if (file_exists(index_path)) {
        GDN_ASSIGN_OR_RETURN(SortedJson index, read_json_file_sorted(index_path));
        auto wm = index.find("weight_map");
        if (!index.is_object() || wm == index.end() || !wm->is_object())
            return Status::error(index_path + ": missing 'weight_map' object");
        std::set<std::string> seen;
        for (auto it = wm->begin(); it != wm->end(); ++it) {
            if (!it.value().is_string())
                return Status::error(index_path + ": weight_map entry '" + it.key() +
                                     "' must be a file name");
            std::string shard = it.value().get<std::string>();
            if (shard.find('/') != std::string::npos || shard.find("..") != std::string::npos)
                return Status::error(index_path + ": weight_map names a file outside the folder: " + shard);
            expected[it.key()] = shard;
            if (seen.insert(shard).second) shard_names.push_back(shard);
        }
    } else if (file_exists(single_path)) {
        shard_names.push_back("model.safetensors");
    } else {
        return Status::error(
            strprintf("%s: no model.safetensors or model.safetensors.index.json found", dir.c_str()));
    }
    std::set<std::string> stored_names;
    for (const auto& shard : shard_names) {
        GDN_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f, SafetensorsFile::open(dir + "/" + shard));
        std::shared_ptr<SafetensorsFile> file(std::move(f));
        for (const auto& e : file->entries()) {
            if (!expected.empty()) {
                auto it = expected.find(e.name);
                if (it == expected.end() || it->second != shard)
                    return Status::error(strprintf("%s: tensor '%s' is not listed for this shard in %s",
                                                   file->path().c_str(), e.name.c_str(), index_path.c_str()));
            }
            if (!stored_names.insert(e.name).second)
                return Status::error(
                    strprintf("%s: tensor '%s' appears in more than one shard", dir.c_str(), e.name.c_str()));
            std::string canon;
            if (!canonical_tensor_name(e.name, &canon)) continue;
            if (!ck.tensors_.emplace(canon, e.view).second)
                return Status::error(
                    strprintf("%s: two tensors map to the same name '%s'", dir.c_str(), canon.c_str()));
        }
        for (const auto& [k, v] : file->metadata()) {
            auto [it, fresh] = ck.metadata_.emplace(k, v);
            if (!fresh && it->second != v)
                return Status::error(strprintf("%s: shards disagree on __metadata__ '%s' ('%s' and '%s')",
                                               dir.c_str(), k.c_str(), it->second.c_str(), v.c_str()));
        }
        ck.files_.push_back(std::move(file));
    }
    for (const auto& [name, shard] : expected)
        if (!stored_names.count(name))
            return Status::error(
                strprintf("%s: tensor '%s' is listed in the index for %s but missing from it", dir.c_str(),
                          name.c_str(), shard.c_str()));
    return ck;
}

const TensorView* Checkpoint::find(const std::string& name) const {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
}

size_t Checkpoint::total_bytes() const {
    size_t n = 0;
    for (const auto& [name, v] : tensors_) n += v.nbytes();
    return n;
}

Checkpoint Checkpoint::from_gguf(std::vector<std::shared_ptr<const GgufFile>> parts,
                                 std::map<std::string, TensorView> tensors) {
    Checkpoint ck;
    ck.dir_ = parts.at(0)->path();
    ck.layout_ = Layout::GGUF;
    ck.gguf_ = std::move(parts);
    ck.tensors_ = std::move(tensors);
    return ck;
}

void Checkpoint::release(const TensorView& t, int64_t r0, int64_t r1) const {
    if (!t.data || t.rank < 1) return;
    bool mapped = false;
    for (const auto& f : gguf_) mapped = mapped || f->maps(t.data);
    for (const auto& f : files_) mapped = mapped || f->maps(t.data);
    if (!mapped) return;
    if (r1 < 0) r1 = t.shape[0];
    const int64_t row_bytes = t.stride[0] * static_cast<int64_t>(dtype_size(t.dtype));
    const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const uintptr_t begin = reinterpret_cast<uintptr_t>(t.data) + static_cast<uintptr_t>(r0 * row_bytes);
    const uintptr_t end = reinterpret_cast<uintptr_t>(t.data) + static_cast<uintptr_t>(r1 * row_bytes);
    const uintptr_t b = (begin + page - 1) / page * page, e = end / page * page;
    if (e > b) ::madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

}  // namespace gdn
