#include <cstdio>

#include "core/log.h"
#include "model/make_model.h"
#include "tools/args.h"
#include "tools/commands.h"

namespace gdn {

int cmd_make_model(int argc, char** argv) {
    auto args = Args::parse(
        argc, argv,
        {"--preset", "--out", "--seed", "--dtype", "--shards", "--tokenizer", "--vocab", "--layers"},
        {"--help", "--list"});
    if (!args) {
        std::fprintf(stderr, "gdn make-model: %s\n", args.message().c_str());
        return 2;
    }
    if (args->has("--help") || args->has("--list") || !args->has("--preset")) {
        std::fprintf(
            stderr,
            "usage: gdn make-model --preset NAME --out DIR [--seed N] [--dtype bf16|f32|f16] [--shards N]\n"
            "                      [--tokenizer DIR] [--vocab N] [--layers N]\n\npresets:\n");
        for (const auto& p : list_presets())
            std::fprintf(stderr, "  %-20s %s\n", p.name.c_str(), p.description.c_str());
        return args->has("--preset") || args->has("--help") || args->has("--list") ? 0 : 2;
    }
    MakeModelOptions o;
    o.preset = args->get("--preset");
    o.out_dir = args->get("--out");
    o.tokenizer_dir = args->get("--tokenizer");
    auto seed = args->get_int("--seed", 0);
    auto shards = args->get_int("--shards", 1);
    auto vocab = args->get_int("--vocab", 0);
    auto layers = args->get_int("--layers", 0);
    for (auto* r : {&seed, &shards, &vocab, &layers})
        if (!*r) {
            std::fprintf(stderr, "gdn make-model: %s\n", r->message().c_str());
            return 2;
        }
    o.seed = static_cast<uint64_t>(*seed);
    o.shards = static_cast<int>(*shards);
    o.vocab_override = static_cast<int>(*vocab);
    o.layers_override = static_cast<int>(*layers);
    if (args->has("--dtype") && !parse_dtype(args->get("--dtype"), &o.dtype)) {
        std::fprintf(stderr, "gdn make-model: unknown --dtype '%s' (bf16, f32, f16)\n",
                     args->get("--dtype").c_str());
        return 2;
    }
    Status st = make_model(o);
    if (!st) {
        std::fprintf(stderr, "gdn make-model: %s\n", st.message().c_str());
        return 1;
    }
    std::fprintf(stderr, "gdn make-model: wrote %s (preset %s, seed %llu)\n", o.out_dir.c_str(),
                 o.preset.c_str(), static_cast<unsigned long long>(o.seed));
    return 0;
}

}  // namespace gdn
