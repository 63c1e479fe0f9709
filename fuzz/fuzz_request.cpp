// An OpenAI request body as the server's workers handle it: parse (depth-limited), validate every field,
// render the demo model's chat template and tokenize, check the context. Any input: an error value or a
// request whose ids and limits hold, never a crash.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/completion_request.h"
#include "tokenizer/chat_template.h"

namespace {
std::shared_ptr<const gdn::Tokenizer> g_tok;
std::shared_ptr<const gdn::ChatTemplate> g_chat;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    auto t = gdn::Tokenizer::load(std::string(GDN_SOURCE_DIR) + "/models/demo");
    if (!t) std::abort();
    g_tok = *t;
    auto c = gdn::ChatTemplate::create(*g_tok);
    if (!c) std::abort();
    g_chat = *c;
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto body = gdn::parse_json(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    if (!body || !body->is_object()) return 0;
    const gdn::RequestLimits lim{"demo", g_tok->vocab_size(), 256};
    for (bool chat : {false, true}) {
        gdn::CompletionRequest r;
        if (auto e = gdn::parse_completion_request(*body, chat, lim, &r)) {
            if (e->status < 400 || e->status > 499 || e->message.empty()) std::abort();
            (void)gdn::to_json_text(e->to_json());
            continue;
        }
        std::vector<int32_t> ids;
        if (auto e = gdn::tokenize_prompt(&r, *g_tok, g_chat.get(), lim, &ids)) {
            (void)gdn::to_json_text(e->to_json());
            continue;
        }
        if (ids.empty() || static_cast<int64_t>(ids.size()) + r.params.max_tokens > lim.max_model_len)
            std::abort();
        for (int32_t id : ids)
            if (id < 0 || id >= lim.vocab) std::abort();
    }
    return 0;
}
