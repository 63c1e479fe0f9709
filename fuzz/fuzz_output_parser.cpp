// Model output is not trusted text: the chat output parser on any bytes, cut into pieces at the points
// the input's first byte picks, with tools and reasoning on. Never a crash, and the pieces' deltas add
// up to the one-shot answer (the streaming contract).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/output_parser.h"

namespace {

gdn::ToolSet make_tools() {
    auto set = gdn::ToolSet::from_request(gdn::Json::parse(R"([{"type": "function", "function": {"name": "f",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"},
        "c": {"type": "object"}}}}}])"));
    if (!set) std::abort();
    return *set;
}

gdn::ParsedOutput run(const std::string& text, const gdn::OutputParserOptions& o, size_t step) {
    gdn::OutputParser p(o);
    gdn::ParsedOutput out;
    for (size_t at = 0; at < text.size(); at += step) out.add(p.feed(text.substr(at, step)));
    out.add(p.finish());
    return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const gdn::ToolSet tools = make_tools();
    if (size < 1) return 0;
    const uint8_t mode = data[0];
    const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
    gdn::OutputParserOptions o;
    o.reasoning = mode & 1;
    o.starts_in_reasoning = mode & 2;
    o.tools = (mode & 4) ? &tools : nullptr;
    const gdn::ParsedOutput whole = run(text, o, text.size() + 1);
    const gdn::ParsedOutput pieces = run(text, o, 1 + (mode >> 3));
    if (whole.reasoning != pieces.reasoning || whole.content != pieces.content ||
        whole.calls.size() != pieces.calls.size())
        std::abort();
    for (size_t i = 0; i < whole.calls.size(); ++i)
        if (whole.calls[i].name != pieces.calls[i].name ||
            whole.calls[i].arguments != pieces.calls[i].arguments)
            std::abort();
    return 0;
}
