// gdn tokenize / gdn detokenize: the tokenizer and chat template from the command line, for scripts.
#include <cstdio>
#include <iostream>
#include <iterator>

#include "engine/gguf_tokenizer.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "util/json_file.h"

namespace gdn {

namespace {
std::string read_stdin() {
    return std::string(std::istreambuf_iterator<char>(std::cin), {});
}
}  // namespace

int cmd_tokenize(int argc, char** argv) {
    auto args = Args::parse(argc, argv, {"--model"}, {"--help", "--chat"});
    if (!args || args->has("--help") || !args->has("--model")) {
        std::fprintf(stderr,
                     "usage: gdn tokenize --model DIR [--chat] < input\n"
                     "  text on stdin -> token ids as a JSON array on stdout\n"
                     "  --chat: stdin holds a JSON list of messages, or {\"messages\": [...], "
                     "\"enable_thinking\": bool},\n"
                     "          rendered through the chat template with the generation prompt first\n");
        if (!args) std::fprintf(stderr, "gdn tokenize: %s\n", args.message().c_str());
        return args && args->has("--help") ? 0 : 2;
    }
    auto tok = load_model_tokenizer(args->get("--model"));
    if (!tok) {
        std::fprintf(stderr, "gdn tokenize: %s\n", tok.message().c_str());
        return 1;
    }
    std::string text = read_stdin();
    if (args->has("--chat")) {
        auto prompt = render_chat_from_json(**tok, text);
        if (!prompt) {
            std::fprintf(stderr, "gdn tokenize: %s\n", prompt.message().c_str());
            return 1;
        }
        text = *prompt;
    }
    std::vector<int32_t> ids = (*tok)->encode(text);
    std::printf("%s\n", Json(ids).dump().c_str());
    return 0;
}

int cmd_detokenize(int argc, char** argv) {
    auto args = Args::parse(argc, argv, {"--model"}, {"--help", "--skip-special"});
    if (!args || args->has("--help") || !args->has("--model")) {
        std::fprintf(stderr,
                     "usage: gdn detokenize --model DIR [--skip-special] < ids.json\n"
                     "  a JSON array of token ids on stdin -> text on stdout\n");
        if (!args) std::fprintf(stderr, "gdn detokenize: %s\n", args.message().c_str());
        return args && args->has("--help") ? 0 : 2;
    }
    auto tok = load_model_tokenizer(args->get("--model"));
    if (!tok) {
        std::fprintf(stderr, "gdn detokenize: %s\n", tok.message().c_str());
        return 1;
    }
    auto j = parse_json(read_stdin(), "stdin");
    if (!j || !j->is_array()) {
        std::fprintf(stderr, "gdn detokenize: stdin must be a JSON array of token ids%s%s\n", j ? "" : ": ",
                     j ? "" : j.message().c_str());
        return 2;
    }
    std::vector<int32_t> ids;
    for (const Json& v : *j) {
        if (!v.is_number_integer()) {
            std::fprintf(stderr, "gdn detokenize: not a token id: %s\n", v.dump().c_str());
            return 2;
        }
        ids.push_back(v.get<int32_t>());
    }
    auto text = (*tok)->decode(ids, args->has("--skip-special"));
    if (!text) {
        std::fprintf(stderr, "gdn detokenize: %s\n", text.message().c_str());
        return 1;
    }
    std::fwrite(text->data(), 1, text->size(), stdout);
    return 0;
}

}  // namespace gdn
