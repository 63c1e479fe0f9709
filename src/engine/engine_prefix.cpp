// Prefix caching, the engine's part: where a request's GDN states are kept (the scheduler keeps them
// there and finds them again) and the state copies it asks for. The bookkeeping is in cache/ and the
// scheduler; this file only knows about prompts and templates.
#include <algorithm>

#include "core/log.h"
#include "engine/engine.h"

namespace gdn {

namespace {
int64_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    const size_t n = std::min(a.size(), b.size());
    size_t i = 0;
    while (i < n && a[i] == b[i]) ++i;
    return static_cast<int64_t>(i);
}
}  // namespace

// Block-aligned positions of a new prompt whose state is worth keeping:
//  - the end of its last complete chat message, before the generation prompt: the next turn of the
//    conversation repeats everything up to there even when the template re-renders the answer (Qwen3.5
//    drops earlier turns' reasoning; the generation prompt ends with "<think>\n");
//  - the end of a leading system message (many conversations share one);
//  - the end of the prompt (a retry, or the same prompt with other sampling parameters);
//  - every prefix_snapshot_interval tokens (long documents with different questions after them).
// The end of each generation is kept as it is decoded (Scheduler: decode-time snapshots). Message ends
// are found by rendering without the generation prompt and comparing tokens, so they are exact for any
// template; a template that cannot render that form just gives no message positions.
std::vector<int64_t> Engine::snapshot_positions(const Prompt& prompt, const std::vector<int32_t>& ids) const {
    const int64_t n = static_cast<int64_t>(ids.size()), bs = cfg_.block_size;
    std::vector<int64_t> at;
    auto keep = [&](int64_t p) {
        p = p / bs * bs;
        if (p > 0 && p <= n) at.push_back(p);
    };
    keep(n);
    if (cfg_.prefix_snapshot_interval > 0)
        for (int64_t p = cfg_.prefix_snapshot_interval; p < n; p += cfg_.prefix_snapshot_interval) keep(p);
    if (chat_ && prompt.messages.is_array() && !prompt.messages.empty()) {
        auto message_end = [&](const Json& messages) -> int64_t {
            ChatRequest cr;
            cr.messages = messages;
            cr.add_generation_prompt = false;
            cr.enable_thinking = prompt.enable_thinking;
            cr.extra = prompt.chat_template_kwargs;
            auto text = chat_->render(cr);
            if (!text.is_ok()) return 0;
            return common_prefix(tok_->encode(*text), ids);
        };
        keep(message_end(prompt.messages));
        const Json& first = prompt.messages[0];
        if (prompt.messages.size() > 1 && first.is_object() && first.contains("role") && first["role"].is_string() &&
            (first["role"] == "system" || first["role"] == "developer"))
            keep(message_end(Json::array({first})));
    }
    std::sort(at.begin(), at.end());
    at.erase(std::unique(at.begin(), at.end()), at.end());
    return at;
}

void Engine::do_state_copies(const std::vector<SlotCopy>& copies) {
    for (const SlotCopy& c : copies) slots_->copy(c.from, c.to);
}

}  // namespace gdn
