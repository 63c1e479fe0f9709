#include "engine/chat_prompt.h"

#include <algorithm>

namespace gdn {

Result<RenderedChat> render_chat(const ChatTemplate& chat, const Tokenizer& tok, const Prompt& prompt,
                                 bool find_message_ends) {
    const Json& messages = prompt.messages;
    ChatRequest cr;
    cr.messages = messages;
    cr.enable_thinking = prompt.enable_thinking;
    cr.extra = prompt.chat_template_kwargs;
    cr.tools = prompt.tools;
    GDN_ASSIGN_OR_RETURN(std::string text, chat.render(cr));
    RenderedChat out;
    out.ids = tok.encode(text);
    const size_t open = text.rfind("<think>");
    out.opens_reasoning = open != std::string::npos && text.find("</think>", open) == std::string::npos;
    // A message end is where the prompt rendered without the generation prompt stops agreeing with the
    // full prompt, in tokens: exact for any template and tokenizer.
    auto message_end = [&](const Json& msgs) -> int64_t {
        ChatRequest head = cr;
        head.messages = msgs;
        head.add_generation_prompt = false;
        auto t = chat.render(head);
        if (!t.is_ok()) return 0;
        const std::vector<int32_t> ids = tok.encode(*t);
        const size_t n = std::min(ids.size(), out.ids.size());
        size_t i = 0;
        while (i < n && ids[i] == out.ids[i]) ++i;
        return static_cast<int64_t>(i);
    };
    if (find_message_ends && messages.is_array() && !messages.empty()) {
        const Json& first = messages[0];
        const bool system_first = messages.size() > 1 && first.is_object() && first.contains("role") &&
                                  first["role"].is_string() &&
                                  (first["role"] == "system" || first["role"] == "developer");
        if (system_first) out.message_ends.push_back(message_end(Json::array({first})));
        out.message_ends.push_back(message_end(messages));
    }
    std::sort(out.message_ends.begin(), out.message_ends.end());
    out.message_ends.erase(std::remove(out.message_ends.begin(), out.message_ends.end(), int64_t{0}),
                           out.message_ends.end());
    return out;
}

}  // namespace gdn
