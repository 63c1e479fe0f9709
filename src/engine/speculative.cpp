#include "engine/speculative.h"

#include <algorithm>
#include <cmath>

#include "core/log.h"
#include "util/json_file.h"

namespace gdn {

const char* spec_method_name(SpecMethod m) {
    switch (m) {
        case SpecMethod::NONE:
            return "none";
        case SpecMethod::MTP:
            return "mtp";
        case SpecMethod::NGRAM:
            return "ngram";
    }
    return "?";
}

Result<SpeculativeConfig> SpeculativeConfig::parse(const std::string& text) {
    auto bad = [](const std::string& m) { return Status::error("--speculative-config: " + m); };
    GDN_ASSIGN_OR_RETURN(Json j, parse_json(text, "--speculative-config"));
    if (!j.is_object())
        return bad("must be a JSON object, e.g. {\"method\": \"mtp\", \"num_speculative_tokens\": 2}");
    SpeculativeConfig c;
    bool has_k = false, has_min = false, has_max = false;
    for (const auto& [key, v] : j.items()) {
        auto int_in = [&](int lo, int hi, int* out) -> Status {
            if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
                return bad(strprintf("\"%s\" must be an integer in [%d, %d]", key.c_str(), lo, hi));
            *out = static_cast<int>(v.get<int64_t>());
            return Status::ok();
        };
        if (key == "method") {
            if (!v.is_string()) return bad("\"method\" must be a string");
            const std::string m = v.get<std::string>();
            if (m == "mtp" || m == "qwen3_next_mtp" || m == "qwen3_5_mtp")
                c.method = SpecMethod::MTP;
            else if (m == "ngram")
                c.method = SpecMethod::NGRAM;
            else
                return bad("unknown method \"" + m +
                           "\" (supported: \"mtp\", \"qwen3_next_mtp\", \"ngram\")");
        } else if (key == "num_speculative_tokens") {
            GDN_RETURN_IF_ERROR(int_in(1, kMaxDrafts, &c.num_speculative_tokens));
            has_k = true;
        } else if (key == "prompt_lookup_min") {
            GDN_RETURN_IF_ERROR(int_in(1, 1024, &c.prompt_lookup_min));
            has_min = true;
        } else if (key == "prompt_lookup_max") {
            GDN_RETURN_IF_ERROR(int_in(1, 1024, &c.prompt_lookup_max));
            has_max = true;
        } else if (key == "draft_head") {
            if (!v.is_string() || !parse_quantization(v.get<std::string>(), &c.draft_head))
                return bad("\"draft_head\" must be \"int8\", \"int4\", \"int4-sym\" or \"none\"");
        } else if (key == "draft_layer") {
            if (!v.is_string() || !parse_quantization(v.get<std::string>(), &c.draft_layer))
                return bad("\"draft_layer\" must be \"int8\", \"int4\", \"int4-sym\" or \"none\"");
        } else if (key == "adaptive") {
            if (!v.is_boolean()) return bad("\"adaptive\" must be true or false");
            c.adaptive = v.get<bool>();
        } else {
            return bad("unsupported key \"" + key +
                       "\" (supported: method, num_speculative_tokens, prompt_lookup_min, prompt_lookup_max, "
                       "adaptive, draft_head, draft_layer)");
        }
    }
    if (c.method == SpecMethod::NONE) return bad("\"method\" is required");
    if (!has_k) return bad("\"num_speculative_tokens\" is required");
    if (c.method == SpecMethod::NGRAM) {
        if (!has_min && !has_max)
            c.prompt_lookup_min = c.prompt_lookup_max = 5;
        else if (!has_min)
            c.prompt_lookup_min = c.prompt_lookup_max;
        else if (!has_max)
            c.prompt_lookup_max = c.prompt_lookup_min;
        if (c.prompt_lookup_min > c.prompt_lookup_max)
            return bad(strprintf("prompt_lookup_min (%d) must be <= prompt_lookup_max (%d)",
                                 c.prompt_lookup_min, c.prompt_lookup_max));
    } else if (has_min || has_max) {
        return bad("prompt_lookup_min / prompt_lookup_max apply to \"method\": \"ngram\" only");
    }
    return c;
}

std::string SpeculativeConfig::describe() const {
    if (!enabled()) return "off";
    const char* how = adaptive ? "up to" : "always";
    if (method == SpecMethod::NGRAM)
        return strprintf("ngram, %s %d drafts, suffixes of %d..%d tokens", how, num_speculative_tokens,
                         prompt_lookup_min, prompt_lookup_max);
    return strprintf("mtp, %s %d drafts", how, num_speculative_tokens);
}

void ngram_propose(const std::vector<int32_t>& tokens, int min_n, int max_n, int k,
                   std::vector<int32_t>* out) {
    const int64_t L = static_cast<int64_t>(tokens.size());
    for (int n = std::min<int64_t>(max_n, L - 1); n >= min_n; --n) {
        const int32_t* suffix = tokens.data() + L - n;
        // The most recent earlier occurrence: start positions s < L - n, newest first.
        for (int64_t s = L - n - 1; s >= 0; --s) {
            if (!std::equal(suffix, suffix + n, tokens.data() + s)) continue;
            const int64_t from = s + n, to = std::min<int64_t>(L, from + k);
            out->insert(out->end(), tokens.begin() + from, tokens.begin() + to);
            return;
        }
    }
}

void SpecCounters::count(int n_drafted, int n_accepted) {
    if (n_drafted <= 0) return;
    verify_steps++;
    drafted += n_drafted;
    accepted += n_accepted;
    if (static_cast<int>(drafted_at.size()) < n_drafted) {
        drafted_at.resize(n_drafted);
        accepted_at.resize(n_drafted);
    }
    // Position i is reached when drafts 0..i-1 were accepted.
    for (int i = 0; i < n_drafted && i <= n_accepted; ++i) {
        drafted_at[i]++;
        if (i < n_accepted) accepted_at[i]++;
    }
}

}  // namespace gdn
