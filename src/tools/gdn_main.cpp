// gdn: the command-line entry point.
#include <cstdio>
#include <cstring>
#include <string>

#include "tools/commands.h"

namespace {

void usage() {
    std::fprintf(
        stderr,
        "usage: gdn <command> [options]\n"
        "\n"
        "commands:\n"
        "  run          generate from a checkpoint folder (--model DIR --prompt-ids 1,2,3 -n 32)\n"
        "  tokenize     text (or --chat messages) on stdin -> token ids (--model DIR)\n"
        "  detokenize   JSON token ids on stdin -> text (--model DIR)\n"
        "  serve        OpenAI-compatible HTTP server (--model DIR --port 8000)\n"
        "  bench        throughput, llama-bench style (--model DIR --pp 512 --tg 128 -r 5)\n"
        "  profile      per-op statistics and a Chrome trace (--model DIR --prompt-len N --gen-len M)\n"
        "  perplexity   PPL and KL divergence on a text file (--model DIR --file TEXT [--ctx 512])\n"
        "  quantize     write an int8 / int4 copy that loads without quantizing (--model DIR --out DIR\n"
        "               --quantization int8|int4|int4-sym)\n"
        "  make-model   write a random-weight checkpoint in Hugging Face layout (--preset NAME --out DIR)\n"
        "\n"
        "Run 'gdn <command> --help' for its options.\n");
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
        usage();
        return argc < 2 ? 2 : 0;
    }
    std::string cmd = argv[1];
    if (cmd == "run") return gdn::cmd_run(argc - 2, argv + 2);
    if (cmd == "make-model") return gdn::cmd_make_model(argc - 2, argv + 2);
    if (cmd == "tokenize") return gdn::cmd_tokenize(argc - 2, argv + 2);
    if (cmd == "bench") return gdn::cmd_bench(argc - 2, argv + 2);
    if (cmd == "serve") return gdn::cmd_serve(argc - 2, argv + 2);
    if (cmd == "profile") return gdn::cmd_profile(argc - 2, argv + 2);
    if (cmd == "quantize") return gdn::cmd_quantize(argc - 2, argv + 2);
    if (cmd == "perplexity") return gdn::cmd_perplexity(argc - 2, argv + 2);
    if (cmd == "detokenize") return gdn::cmd_detokenize(argc - 2, argv + 2);
    std::fprintf(stderr, "gdn: unknown command '%s'\n", cmd.c_str());
    usage();
    return 2;
}
