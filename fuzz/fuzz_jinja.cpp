// A chat template's source: parses or fails with a message; a parsed template renders a fixed
// conversation (tools included) or fails with a message, within the renderer's limits.
#include <cstdint>
#include <string>

#include "tokenizer/jinja.h"
#include "util/json_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto t = gdn::jinja::Template::parse(std::string(reinterpret_cast<const char*>(data), size));
    if (!t) return 0;
    static const gdn::Json ctx = gdn::Json::parse(R"({
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi <b>"},
                     {"role": "assistant", "content": "<think>\nhm\n</think>\n\nHello", "tool_calls":
                        [{"function": {"name": "f", "arguments": {"x": [1, 2.5, null, true]}}}]},
                     {"role": "tool", "content": "42"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "add_generation_prompt": true, "enable_thinking": false, "bos_token": "<s>", "eos_token": "</s>"})");
    auto out = t->render(gdn::jinja::Value::from_json(ctx));
    (void)out;
    return 0;
}
