#include "tools/args.h"

#include <cerrno>
#include <cstdlib>

#include "core/log.h"
#include "model/state.h"

namespace gdn {

Result<Args> Args::parse(int argc, char** argv, const std::set<std::string>& options,
                         const std::set<std::string>& flags) {
    Args a;
    for (int i = 0; i < argc; ++i) {
        std::string k = argv[i];
        if (flags.count(k)) {
            a.values_.insert_or_assign(k,
                                       std::string(1, '1'));  // (not = "1": GCC 12 -Wrestrict false positive)
        } else if (options.count(k)) {
            if (i + 1 >= argc) return Status::error("option " + k + " needs a value");
            a.values_[k] = argv[++i];
        } else {
            std::string known;
            for (const auto* set : {&options, &flags})
                for (const auto& name : *set) known.append(1, ' ').append(name);
            return Status::error("unknown argument '" + k + "' (known:" + known + ")");
        }
    }
    return a;
}

Result<long long> Args::get_int(const std::string& k, long long def) const {
    auto it = values_.find(k);
    if (it == values_.end()) return def;
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(it->second.c_str(), &end, 10);
    if (errno || end == it->second.c_str() || *end)
        return Status::error("option " + k + " expects an integer, got '" + it->second + "'");
    return v;
}

Result<double> Args::get_double(const std::string& k, double def) const {
    auto it = values_.find(k);
    if (it == values_.end()) return def;
    errno = 0;
    char* end = nullptr;
    double v = std::strtod(it->second.c_str(), &end);
    if (errno || end == it->second.c_str() || *end)
        return Status::error("option " + k + " expects a number, got '" + it->second + "'");
    return v;
}

Result<std::vector<int>> parse_id_list(const std::string& s) {
    std::vector<int> ids;
    size_t i = 0;
    while (i < s.size()) {
        size_t j = s.find(',', i);
        if (j == std::string::npos) j = s.size();
        std::string tok = s.substr(i, j - i);
        while (!tok.empty() && tok.front() == ' ') tok.erase(tok.begin());
        while (!tok.empty() && tok.back() == ' ') tok.pop_back();
        char* end = nullptr;
        errno = 0;
        long v = std::strtol(tok.c_str(), &end, 10);
        if (tok.empty() || errno || *end || v < 0 || v > 0x7fffffff)
            return Status::error("invalid token id '" + tok + "' in '" + s +
                                 "' (expected comma-separated ids)");
        ids.push_back(static_cast<int>(v));
        i = j + 1;
    }
    if (ids.empty()) return Status::error("empty id list");
    return ids;
}

Result<DType> kv_cache_dtype(const Args& a, bool bf16_activations) {
    if (!a.has("--kv-cache-dtype")) return default_kv_dtype(bf16_activations);
    const std::string v = a.get("--kv-cache-dtype");
    if (v == "f32") return DType::F32;
    if (v != "bf16") return Status::error("--kv-cache-dtype must be f32 or bf16, got '" + v + "'");
    if (!bf16_activations) return Status::error("--kv-cache-dtype bf16 needs --dtype bf16");
    return DType::BF16;
}

}  // namespace gdn
