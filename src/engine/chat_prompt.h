// A chat request rendered to the token ids the model sees, with the token positions where its complete
// messages end (the prefix cache keeps GDN states there). One implementation for the engine's
// add_request and the server, which tokenizes before admission.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/json_file.h"

namespace gdn {

struct RenderedChat {
    std::vector<int32_t> ids;
    // Token counts of the prompt's prefixes that end after a complete message: the last message before
    // the generation prompt (a conversation's next turn repeats everything up to there even when the
    // template re-renders earlier answers, as Qwen3.5's drops their reasoning) and a leading system
    // message (shared by many conversations). Ascending; empty where the template cannot render that
    // form without the generation prompt.
    std::vector<int64_t> message_ends;
    // The prompt ends inside an open <think> block (Qwen3.5's generation prompt "<think>\n"): the
    // answer starts with reasoning.
    bool opens_reasoning = false;
};

// find_message_ends: compute message_ends (two more renders and encodes; only the prefix cache uses them).
// `prompt` is a chat prompt (messages, tools, enable_thinking, template kwargs).
Result<RenderedChat> render_chat(const ChatTemplate& chat, const Tokenizer& tok, const Prompt& prompt,
                                 bool find_message_ends);

}  // namespace gdn
