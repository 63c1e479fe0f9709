// gdn quantize: quantizes a checkpoint once (as --quantization does at every load) and writes the packed
// weights out (model/packed_checkpoint.h), so later loads read them as they are.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "core/log.h"
#include "core/thread_pool.h"
#include "model/model.h"
#include "model/packed_checkpoint.h"
#include "ops/dispatch.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/model_loading.h"

namespace gdn {

namespace fs = std::filesystem;

namespace {

void usage() {
    std::fprintf(
        stderr,
        "usage: gdn quantize --model DIR --out DIR --quantization int8|int4|int4-sym [--threads N]\n"
        "  Quantizes DIR's weights (bf16 / f16 / f32) as --quantization does at load and writes a\n"
        "  checkpoint folder that loads in that format without quantizing again: model.safetensors with\n"
        "  the packed weights (tensors gdn.packed.*, u8) and the float tensors, plus DIR's other files\n"
        "  (config, tokenizer, templates). The MTP layer is kept when DIR has one. --out must be a new\n"
        "  or empty folder.\n");
}

// DIR's files beside the weights, copied as they are.
bool is_weights_file(const fs::path& p) {
    const std::string n = p.filename().string();
    return p.extension() == ".safetensors" || n == "model.safetensors.index.json";
}

}  // namespace

int cmd_quantize(int argc, char** argv) {
    auto args = Args::parse(argc, argv, {"--model", "--out", "--quantization", "--threads"}, {"--help"});
    if (!args || args->has("--help") || !args->has("--model") || !args->has("--out") ||
        !args->has("--quantization")) {
        usage();
        if (!args) std::fprintf(stderr, "gdn quantize: %s\n", args.message().c_str());
        return args && args->has("--help") ? 0 : 2;
    }
    auto fail = [](const std::string& m, int code) {
        std::fprintf(stderr, "gdn quantize: %s\n", m.c_str());
        return code;
    };
    auto threads = args->get_int("--threads", default_thread_count());
    if (!threads || *threads < 1) return fail("--threads must be a positive integer", 2);
    auto opt = load_options(*args);
    if (!opt) return fail(opt.message(), 2);
    if (!opt->quantization)
        return fail("--quantization must be int8, int4 or int4-sym (none has nothing to write)", 2);
    const fs::path in = args->get("--model"), out = args->get("--out");
    std::error_code ec;
    if (!fs::is_directory(in, ec)) return fail("--model " + in.string() + " is not a folder", 1);
    if (fs::exists(out, ec) && (!fs::is_directory(out, ec) || !fs::is_empty(out, ec)))
        return fail("--out " + out.string() + " exists and is not an empty folder: give a new one", 1);
    if (fs::exists(out, ec) && fs::equivalent(in, out, ec)) return fail("--out must differ from --model", 1);
    if (Status ks = configure_kernels_from_env(); !ks) return fail(ks.message(), 2);
    set_global_threads(static_cast<int>(*threads));

    // Keep the MTP layer (speculative decoding) when the checkpoint has one.
    {
        auto ck = Checkpoint::open(in.string());
        if (!ck) return fail(ck.message(), 1);
        opt->mtp = ck->find("mtp.fc.weight") || ck->find(std::string(kPackedPrefix) + "mtp.fc");
    }
    const auto t0 = std::chrono::steady_clock::now();
    const std::string label =
        std::string("quantizing to ") + quantization_name(*opt->quantization) + " " + in.string();
    auto model = Model::load(
        ExecContext::process(), in.string(), [&](int done, int total) { print_progress(label, done, total); },
        *opt);
    if (!model) return fail(model.message(), 1);
    const ModelWeights& w = (*model)->weights();
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    GDN_LOG_INFO("quantized %s in %.2f s: %s", in.string().c_str(), load_s, weights_summary(w).c_str());

    // Everything is written into a fresh folder; on any failure the folder is removed again.
    const bool made_dir = !fs::exists(out, ec);
    if (made_dir && !fs::create_directories(out, ec))
        return fail("cannot create " + out.string() + ": " + ec.message(), 1);
    auto undo = [&](const std::string& m) {
        std::error_code e2;
        if (made_dir)
            fs::remove_all(out, e2);
        else
            for (const auto& f : fs::directory_iterator(out, e2)) fs::remove_all(f.path(), e2);
        return fail(m, 1);
    };
    for (const auto& f : fs::directory_iterator(in, ec)) {
        if (!f.is_regular_file() || is_weights_file(f.path())) continue;
        if (!fs::copy_file(f.path(), out / f.path().filename(), ec))
            return undo("cannot copy " + f.path().string() + ": " + ec.message());
    }
    if (ec) return undo("cannot list " + in.string() + ": " + ec.message());
    const auto t1 = std::chrono::steady_clock::now();
    const fs::path st = out / "model.safetensors";
    if (Status s = write_packed_checkpoint(w, *w.checkpoint, w.float_tensors, st.string()); !s)
        return undo(s.message());
    const double write_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    std::fprintf(
        stderr,
        "gdn quantize: wrote %s (%s, %.1f MB%s) in %.2f s; quantizing took %.2f s, peak RSS %.1f MB\n",
        out.string().c_str(), quantization_name(*opt->quantization), fs::file_size(st, ec) / 1e6,
        opt->mtp ? ", with the MTP layer" : "", write_s, load_s, peak_rss_bytes() / 1e6);
    return 0;
}

}  // namespace gdn
