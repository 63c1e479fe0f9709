// Minimal command-line parsing for the gdn subcommands: --key value, --flag, -n value.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace gdn {

class Args {
  public:
    // `flags` take no value; every other option takes exactly one value.
    static Result<Args> parse(int argc, char** argv, const std::set<std::string>& options,
                              const std::set<std::string>& flags);
    bool has(const std::string& k) const { return values_.count(k) > 0; }
    std::string get(const std::string& k, const std::string& def = "") const {
        auto it = values_.find(k);
        return it == values_.end() ? def : it->second;
    }
    Result<long long> get_int(const std::string& k, long long def) const;
    Result<double> get_double(const std::string& k, double def) const;

  private:
    std::map<std::string, std::string> values_;
};

Result<std::vector<int>> parse_id_list(const std::string& s);

// --kv-cache-dtype f32|bf16; unset: default_kv_dtype (bf16 with bf16 activations). bf16 is only valid
// with bf16 activations.
Result<DType> kv_cache_dtype(const Args& a, bool bf16_activations);

}  // namespace gdn
