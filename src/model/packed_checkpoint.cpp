#include "model/packed_checkpoint.h"

#include <cstring>
#include <sstream>

#include "core/log.h"
#include "model/safetensors_writer.h"
#include "model/weights.h"

namespace gdn {

namespace {

// "int8 7168 1024" -> format, N, K.
bool parse_entry(const std::string& s, WeightFormat* f, int64_t* N, int64_t* K) {
    std::istringstream in(s);
    std::string name, rest;
    if (!(in >> name >> *N >> *K) || (in >> rest) || !parse_weight_format(name, f)) return false;
    return *N > 0 && *K > 0;
}

// The stored name of a canonical one: HF's "model." prefix except where the checkpoint reader keeps a
// name as it is (mtp.*, lm_head.weight).
std::string stored_name(const std::string& canonical) {
    if (canonical.rfind("mtp.", 0) == 0 || canonical == "lm_head.weight") return canonical;
    return "model." + canonical;
}

}  // namespace

Result<std::optional<WeightFormat>> packed_checkpoint_format(const Checkpoint& ck) {
    const auto& md = ck.metadata();
    auto q = md.find(kPackedQuantizationKey);
    if (q == md.end()) return std::optional<WeightFormat>();
    auto v = md.find(kPackedVersionKey);
    if (v == md.end() || v->second != kPackedVersion)
        return Status::error(
            strprintf("%s: pre-quantized checkpoint of packed-format version '%s'; this build reads "
                      "version %s (quantize the original checkpoint again with this gdn)",
                      ck.dir().c_str(), v == md.end() ? "(none)" : v->second.c_str(), kPackedVersion));
    std::optional<WeightFormat> f;
    if (!parse_quantization(q->second, &f) || !f)
        return Status::error(strprintf("%s: __metadata__ %s is '%s', expected int8, int4 or int4-sym",
                                       ck.dir().c_str(), kPackedQuantizationKey, q->second.c_str()));
    return f;
}

Result<PackedWeight> read_packed_weight(const Checkpoint& ck, const std::string& linear, int64_t N,
                                        int64_t K) {
    const std::string name = kPackedPrefix + linear;
    auto fail = [&](const std::string& what) {
        return Status::error(
            strprintf("%s: packed weight '%s': %s", ck.dir().c_str(), name.c_str(), what.c_str()));
    };
    const TensorView* t = ck.find(name);
    auto md = ck.metadata().find(name);
    if (!t) return fail("missing (needed by the config)");
    if (md == ck.metadata().end()) return fail("no '<format> <N> <K>' entry in __metadata__");
    WeightFormat format;
    int64_t stored_N, stored_K;
    if (!parse_entry(md->second, &format, &stored_N, &stored_K))
        return fail("__metadata__ entry '" + md->second + "' is not '<int8|int4-sym|int4-k|int6-k> <N> <K>'");
    if (stored_N != N || stored_K != K)
        return fail(strprintf("holds [%lld, %lld], the config needs [%lld, %lld]", (long long)stored_N,
                              (long long)stored_K, (long long)N, (long long)K));
    PackedWeight p;
    quant::set_quantized_shape(format, N, K, &p);
    const int64_t bb = quant::block_bytes(p.format);
    if (t->dtype != DType::U8 || t->rank != 3 || t->shape[0] != p.n_panels || t->shape[1] != p.n_blocks ||
        t->shape[2] != bb)
        return fail(strprintf("is %s %s, expected u8 [%lld, %lld, %lld] for %s [%lld, %lld]",
                              dtype_name(t->dtype), t->shape_str().c_str(), (long long)p.n_panels,
                              (long long)p.n_blocks, (long long)bb, weight_format_name(p.format),
                              (long long)N, (long long)K));
    p.data.allocate(p.bytes(), false);
    std::memcpy(p.data.data(), t->data, p.bytes());
    ck.release(*t);
    // A corrupt scale would only show as NaN logits much later: say where it is now.
    int64_t block;
    uint16_t h;
    if (quant::find_nonfinite_scale(p, &block, &h))
        return fail(strprintf("a non-finite scale (f16 0x%04x) in panel %lld, block %lld", h,
                              (long long)(block / p.n_blocks), (long long)(block % p.n_blocks)));
    return p;
}

Status write_packed_checkpoint(const ModelWeights& w, const Checkpoint& ck,
                               const std::vector<std::string>& float_tensors, const std::string& path) {
    if (!w.quantization) return Status::error("write_packed_checkpoint: the weights are not quantized");
    SafetensorsWriter out;
    out.set_metadata(kPackedQuantizationKey, quantization_name(*w.quantization));
    out.set_metadata(kPackedVersionKey, kPackedVersion);
    for (const std::string& canon : float_tensors) {
        const TensorView* t = ck.find(canon);
        if (!t) return Status::error(ck.dir() + ": tensor '" + canon + "' vanished from the checkpoint");
        std::vector<int64_t> shape(t->shape, t->shape + t->rank);
        out.add_raw(stored_name(canon), t->dtype, shape, [t](uint8_t* dst, uint64_t bytes) {
            std::memcpy(dst, t->data, bytes);  // the loader's views are contiguous tensors of the file
        });
    }
    Status bad = Status::ok();
    for_each_linear(w, [&](const std::string& name, const PackedWeight& p) {
        if (!is_quantized(p.format)) return;  // the router and shared-expert gate: float tensors above
        if (p.bytes() != static_cast<int64_t>(p.data.size()) && bad.is_ok())
            bad = Status::error("packed weight '" + name + "' has an inconsistent size");
        out.set_metadata(kPackedPrefix + name, strprintf("%s %lld %lld", weight_format_name(p.format),
                                                         (long long)p.N, (long long)p.K));
        out.add_raw(kPackedPrefix + name, DType::U8, {p.n_panels, p.n_blocks, quant::block_bytes(p.format)},
                    [&p](uint8_t* dst, uint64_t bytes) { std::memcpy(dst, p.data.data(), bytes); });
    });
    GDN_RETURN_IF_ERROR(bad);
    return out.write(path);
}

}  // namespace gdn
