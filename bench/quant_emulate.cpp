// Writes a copy of a checkpoint whose 2-D weights went through a quantizer and back to f32, so that
// `gdn perplexity --kl-divergence` measures the weight error of any format on the same text with the
// same forward pass: llama.cpp's file types (llama_quant_emulation.h) or our own schemes and formats
// (packed and unpacked by quant::pack_quantized / dequantize_row: exactly the values
// `--quantization int8|int4|int4-sym` packs, each matrix in the format model/quant_scheme.h gives it).
//
//   quant_emulate --model models/demo --out /tmp/demo-q4km --llama Q4_K_M
//   quant_emulate --model models/demo --out /tmp/demo-int4 --ours int4
//   quant_emulate --model models/demo --out /tmp/demo-mix --ours int4 --tensor-type 'down_proj=int8'
//
// The MTP layer is copied unchanged (perplexity never runs it); every tensor is written as f32.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "llama_quant_emulation.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/quant_scheme.h"
#include "model/safetensors_writer.h"
#include "ops/linear.h"

namespace fs = std::filesystem;
using namespace gdn;

namespace {

int usage(const char* why) {
    std::fprintf(
        stderr,
        "quant_emulate: %s\nusage: quant_emulate --model DIR --out DIR (--llama Q8_0|Q4_0|Q4_K_M|Q6_K | "
        "--ours int8|int4|int4-sym) [--tensor-type REGEX=TYPE ...]\n"
        "  TYPE (F32 Q8_0 Q4_0 Q4_K Q6_K int8 int4-sym int4-k int6-k) replaces the choice for every "
        "main-model weight whose\n"
        "  canonical name (\"layers.3.mlp.down_proj.weight\", \"embed_tokens.weight\") the regex finds;\n"
        "  the first matching rule wins, and a rule that matches nothing is an error\n",
        why);
    return 2;
}

bool is_main_matrix(const std::string& name, const TensorView& t) {
    return t.rank == 2 && name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0 &&
           name.rfind("mtp.", 0) != 0;
}

// Our formats' round trip of one row: packed as a [1, K] weight and read back.
void round_trip_ours(WeightFormat f, const float* x, int64_t K, float* out) {
    PackedWeight w;
    quant::pack_quantized(
        ExecContext::process(), f, 1, K, [&](int64_t, float* dst) { std::copy(x, x + K, dst); }, &w);
    quant::dequantize_row(w, 0, out);
}

// The packed linear a checkpoint matrix becomes part of (for_each_linear's name, model/weights.h).
std::string linear_of(const std::string& canonical, bool tied) {
    if (canonical == "lm_head.weight" || (tied && canonical == "embed_tokens.weight")) return "lm_head";
    std::string n = canonical.substr(0, canonical.size() - 7);  // without ".weight"
    static const std::pair<std::regex, const char*> kFused[] = {
        {std::regex("in_proj_[a-z]+$"), "in_proj"}, {std::regex("out_proj$"), "out"},
        {std::regex("[qkv]_proj$"), "qkv"},         {std::regex("o_proj$"), "o"},
        {std::regex("(gate|up)_proj$"), "gate_up"}, {std::regex("down_proj$"), "down"}};
    for (const auto& [re, to] : kFused)
        if (std::regex_search(n, re)) return std::regex_replace(n, re, to);
    return n;
}

// Per matrix: a label for the report, its bits per weight (0: kept in f32), and the row round trip.
struct Plan {
    std::string label;
    double bits = 0;
    std::function<void(const float*, int64_t, float*)> row;
};

Plan plan_for(const std::string& type, const llama_emul::WeightInfo& m) {
    using llama_emul::GgmlType;
    WeightFormat f;
    if (parse_weight_format(type, &f)) {
        const int64_t bk = weight_block_k(f),
                      Kp = quant::n_blocks(f, m.cols) * bk;  // k padded to whole blocks
        const double bits = 8.0 * quant::block_bytes(f) / (bk * quant::kCols) * Kp / m.cols;
        return {type, bits, [f](const float* x, int64_t n, float* y) { round_trip_ours(f, x, n, y); }};
    }
    for (GgmlType t : {GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
        if (type != llama_emul::type_name(t)) continue;
        if (t == GgmlType::F32) return {type, 0, nullptr};
        if (m.cols % llama_emul::block_size(t) != 0)
            throw std::invalid_argument(m.name + ": " + std::to_string(m.cols) + " columns do not fill " +
                                        type + " blocks");
        return {type, llama_emul::bits_per_weight(t),
                [t](const float* x, int64_t n, float* y) { llama_emul::round_trip(t, x, n, y); }};
    }
    throw std::invalid_argument("unknown type '" + type +
                                "' (F32, Q8_0, Q4_0, Q4_K, Q6_K, int8, int4-sym, int4-k, int6-k)");
}

}  // namespace

int main(int argc, char** argv) {
    std::string model, out, llama, ours;
    struct Rule {
        std::string text;
        std::regex re;
        std::string type;
        bool used = false;
    };
    std::vector<Rule> overrides;  // --tensor-type: first match wins
    for (int i = 1; i < argc; ++i) {
        auto value = [&](std::string* dst) {
            if (i + 1 >= argc) return false;
            *dst = argv[++i];
            return true;
        };
        const std::string a = argv[i];
        std::string rule;
        bool ok = a == "--model"         ? value(&model)
                  : a == "--out"         ? value(&out)
                  : a == "--llama"       ? value(&llama)
                  : a == "--ours"        ? value(&ours)
                  : a == "--tensor-type" ? value(&rule)
                                         : false;
        if (!ok) return usage(("bad argument '" + a + "'").c_str());
        if (!rule.empty()) {
            const size_t eq = rule.rfind('=');
            if (eq == std::string::npos || eq == 0)
                return usage(("--tensor-type wants REGEX=TYPE, got '" + rule + "'").c_str());
            try {
                overrides.push_back({rule, std::regex(rule.substr(0, eq)), rule.substr(eq + 1)});
            } catch (const std::regex_error& e) {
                return usage(("--tensor-type '" + rule + "': " + e.what()).c_str());
            }
        }
    }
    if (model.empty() || out.empty() || llama.empty() == ours.empty())
        return usage("give --model, --out and exactly one of --llama / --ours");
    llama_emul::Mixture mix{};
    if (!llama.empty() && !llama_emul::parse_mixture(llama, &mix))
        return usage(("unknown --llama " + llama).c_str());
    std::optional<WeightFormat> scheme;
    if (!ours.empty() && (!parse_quantization(ours, &scheme) || !scheme))
        return usage(("unknown --ours " + ours + " (int8, int4, int4-sym)").c_str());
    if (fs::exists(out)) return usage((out + " exists; give a new folder").c_str());

    auto cfg = load_model_config(model);
    if (!cfg) return usage(cfg.message().c_str());
    auto ck = Checkpoint::open(model);
    if (!ck) return usage(ck.message().c_str());
    const bool tied = cfg->tie_embeddings;

    std::vector<llama_emul::WeightInfo> mats;
    for (const auto& [name, t] : ck->tensors())
        if (is_main_matrix(name, t)) mats.push_back({name, t.shape[0], t.shape[1]});

    std::map<std::string, Plan> plan;
    try {
        std::vector<llama_emul::GgmlType> types;
        if (!llama.empty()) types = llama_emul::choose_types(mix, mats, tied, cfg->n_layers);
        for (size_t i = 0; i < mats.size(); ++i) {
            const auto& m = mats[i];
            // The engine's choice (model/quant_scheme.h); routers stay in float as in the engine.
            std::string type =
                !llama.empty() ? llama_emul::type_name(types[i])
                : llama_emul::is_router(m.name)
                    ? "F32"
                    : weight_format_name(scheme_format(*scheme, linear_of(m.name, tied), cfg->n_layers));
            for (Rule& r : overrides) {
                if (std::regex_search(m.name, r.re)) {
                    type = r.type;
                    r.used = true;
                    break;
                }
            }
            plan[m.name] = plan_for(type, m);
        }
        for (const Rule& r : overrides) {
            plan_for(r.type, {"--tensor-type " + r.text, 1, 256});  // an unknown type is an error even unused
            if (!r.used)
                throw std::invalid_argument("--tensor-type '" + r.text + "' matches no main-model weight");
        }
    } catch (const std::exception& e) {
        return usage(e.what());
    }

    SafetensorsWriter writer;
    std::map<std::string, std::pair<int64_t, int>> by_label;  // label -> (weights, matrices)
    double bits = 0;
    int64_t n_weights = 0;
    for (const auto& [name, t] : ck->tensors()) {
        const TensorView view = t;
        const std::string stored =
            name.rfind("mtp.", 0) == 0 || name == "lm_head.weight" ? name : "model.language_model." + name;
        std::vector<int64_t> shape(view.shape, view.shape + view.rank);
        auto it = plan.find(name);
        if (it == plan.end() || it->second.bits == 0) {
            writer.add(stored, DType::F32, shape,
                       [view](float* dst, int64_t n) { convert_to_f32(view.dtype, view.data, dst, n); });
            continue;
        }
        const Plan p = it->second;
        by_label[p.label].first += view.numel();
        by_label[p.label].second += 1;
        bits += p.bits * view.numel();
        n_weights += view.numel();
        writer.add(stored, DType::F32, shape, [view, p](float* dst, int64_t n) {
            convert_to_f32(view.dtype, view.data, dst, n);
            const int64_t K = view.shape[1];
            for (int64_t r = 0; r < view.shape[0]; ++r) p.row(dst + r * K, K, dst + r * K);
        });
    }

    fs::create_directories(out);
    for (const auto& e : fs::directory_iterator(model)) {
        const std::string f = e.path().filename().string();
        if (e.is_regular_file() && f.find(".safetensors") == std::string::npos)
            fs::copy_file(e.path(), fs::path(out) / f);
    }
    const Status st = writer.write((fs::path(out) / "model.safetensors").string());
    if (!st.is_ok()) {
        std::error_code ec;
        fs::remove_all(out, ec);  // no half-written model is left behind
        return usage(st.message().c_str());
    }

    std::printf("%s -> %s (%s)\n", model.c_str(), out.c_str(), llama.empty() ? ours.c_str() : llama.c_str());
    for (const auto& [label, c] : by_label)
        std::printf("  %-5s %2d matrices, %9lld weights\n", label.c_str(), c.second,
                    static_cast<long long>(c.first));
    if (n_weights > 0)
        std::printf("  %.3f bits per weight over the %lld quantized weights of the main model\n",
                    bits / n_weights, static_cast<long long>(n_weights));
    else
        std::printf("  no weight quantized (every main-model matrix kept in f32)\n");
    return 0;
}
