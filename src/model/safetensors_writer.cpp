#include "model/safetensors_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/log.h"
#include "util/json_file.h"

namespace gdn {

uint64_t SafetensorsWriter::Pending::numel() const {
    uint64_t n = 1;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    return n;
}

void SafetensorsWriter::add(std::string name, DType dtype, std::vector<int64_t> shape, Fill fill) {
    tensors_.push_back({std::move(name), dtype, std::move(shape), std::move(fill), nullptr});
}

void SafetensorsWriter::add_raw(std::string name, DType dtype, std::vector<int64_t> shape, RawFill fill) {
    tensors_.push_back({std::move(name), dtype, std::move(shape), nullptr, std::move(fill)});
}

std::vector<SafetensorsWriter::Pending> SafetensorsWriter::ordered() const {
    std::vector<Pending> v = tensors_;
    std::stable_sort(v.begin(), v.end(), [](const Pending& a, const Pending& b) {
        size_t sa = dtype_size(a.dtype), sb = dtype_size(b.dtype);
        if (sa != sb) return sa > sb;
        return a.name < b.name;
    });
    return v;
}

void SafetensorsWriter::keep_only(const std::function<bool(const std::string&)>& keep) {
    std::erase_if(tensors_, [&](const Pending& p) { return !keep(p.name); });
}

uint64_t SafetensorsWriter::data_bytes() const {
    uint64_t n = 0;
    for (const auto& t : tensors_) n += t.numel() * dtype_size(t.dtype);
    return n;
}

std::vector<std::pair<std::string, uint64_t>> SafetensorsWriter::sizes() const {
    std::vector<std::pair<std::string, uint64_t>> out;
    for (const auto& t : tensors_) out.emplace_back(t.name, t.numel() * dtype_size(t.dtype));
    return out;
}

Status SafetensorsWriter::write(const std::string& path) const {
    std::vector<Pending> order = ordered();
    Json header = Json::object();
    Json meta = Json::object();
    meta["format"] = "pt";
    for (const auto& [k, v] : metadata_) meta[k] = v;
    header["__metadata__"] = meta;
    uint64_t off = 0;
    for (const auto& t : order) {
        uint64_t n = t.numel() * dtype_size(t.dtype);
        const char* dt = t.dtype == DType::F32    ? "F32"
                         : t.dtype == DType::BF16 ? "BF16"
                         : t.dtype == DType::F16  ? "F16"
                                                  : "U8";
        header[t.name] = {{"dtype", dt}, {"shape", t.shape}, {"data_offsets", {off, off + n}}};
        off += n;
    }
    std::string hs = header.dump();
    while (hs.size() % 8) hs.push_back(' ');
    std::string tmp = path + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) return Status::error(strprintf("cannot create %s: %s", tmp.c_str(), std::strerror(errno)));
    uint64_t hl = hs.size();
    bool ok = std::fwrite(&hl, 8, 1, f) == 1 && std::fwrite(hs.data(), 1, hs.size(), f) == hs.size();
    std::vector<float> vals;
    std::vector<uint8_t> bytes;
    for (const auto& t : order) {
        if (!ok) break;
        const uint64_t n = t.numel();
        if (t.raw) {
            bytes.assign(n * dtype_size(t.dtype), 0);
            t.raw(bytes.data(), bytes.size());
            ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
            continue;
        }
        vals.assign(n, 0.0f);
        t.fill(vals.data(), static_cast<int64_t>(n));
        bytes.resize(n * dtype_size(t.dtype));
        convert_from_f32(vals.data(), t.dtype, bytes.data(), n);
        ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    }
    ok = (std::fclose(f) == 0) && ok;
    if (!ok) {
        std::remove(tmp.c_str());
        return Status::error(strprintf("failed writing %s: %s", path.c_str(), std::strerror(errno)));
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::remove(tmp.c_str());
        return Status::error(
            strprintf("cannot rename %s to %s: %s", tmp.c_str(), path.c_str(), std::strerror(errno)));
    }
    return Status::ok();
}

}  // namespace gdn
