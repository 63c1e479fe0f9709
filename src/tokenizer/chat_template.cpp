#include "tokenizer/chat_template.h"

#include "core/log.h"

namespace gdn {

namespace {

// A tool call's arguments as an object: OpenAI sends them as a JSON string, templates iterate them
// (arguments|items), so a string holding an object is parsed.
std::optional<Json> arguments_object(const Json& a) {
    if (a.is_object()) return a;
    if (!a.is_string()) return std::nullopt;
    auto parsed = parse_json(a.get<std::string>(), "tool call arguments");
    if (!parsed || !parsed->is_object()) return std::nullopt;
    return std::move(*parsed);
}

}  // namespace

Result<std::shared_ptr<const ChatTemplate>> ChatTemplate::create(const Tokenizer& tok) {
    if (tok.chat_template().empty())
        return Status::error(
            "the checkpoint has no chat template (tokenizer_config.json 'chat_template' or "
            "chat_template.jinja)");
    return from_source(tok.chat_template(), tok.bos_token(), tok.eos_token());
}

Result<std::shared_ptr<const ChatTemplate>> ChatTemplate::from_source(const std::string& source,
                                                                      std::string bos, std::string eos) {
    auto ct = std::make_shared<ChatTemplate>();
    GDN_ASSIGN_OR_RETURN(ct->tmpl_, jinja::Template::parse(source));
    ct->bos_ = std::move(bos);
    ct->eos_ = std::move(eos);
    ct->renders_tools_ = source.find("tools") != std::string::npos;
    return std::shared_ptr<const ChatTemplate>(ct);
}

Status validate_messages(const Json& messages) {
    if (!messages.is_array()) return Status::error("'messages' must be a list");
    if (messages.empty()) return Status::error("'messages' must not be empty");
    for (size_t i = 0; i < messages.size(); ++i) {
        const Json& m = messages[i];
        if (!m.is_object()) return Status::error(strprintf("messages[%zu] must be an object", i));
        if (!m.contains("role") || !m["role"].is_string())
            return Status::error(strprintf("messages[%zu].role must be a string", i));
        const std::string role = m["role"].get<std::string>();
        if (role != "system" && role != "user" && role != "assistant" && role != "tool" &&
            role != "developer")
            return Status::error(strprintf(
                "messages[%zu].role '%s' is not one of system, user, assistant, tool", i, role.c_str()));
        if (m.contains("content") && !m["content"].is_string() && !m["content"].is_null() &&
            !m["content"].is_array())
            return Status::error(strprintf("messages[%zu].content must be a string or a list of parts", i));
        // OpenAI's assistant turns may leave content out (a turn that only calls tools): it is null. Every
        // other role must say something.
        if (!m.contains("content") && role != "assistant")
            return Status::error(
                strprintf("messages[%zu].content is required for role '%s'", i, role.c_str()));
        if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null()) {
            if (!tc->is_array())
                return Status::error(strprintf("messages[%zu].tool_calls must be a list", i));
            for (size_t k = 0; k < tc->size(); ++k) {
                const Json& call = (*tc)[k];
                const Json* f = call.is_object() && call.contains("function") ? &call["function"] : nullptr;
                if (!f || !f->is_object() || !f->contains("name") || !(*f)["name"].is_string())
                    return Status::error(
                        strprintf("messages[%zu].tool_calls[%zu].function.name must be a string", i, k));
                if (!f->contains("arguments") || !arguments_object((*f)["arguments"]))
                    return Status::error(strprintf(
                        "messages[%zu].tool_calls[%zu].function.arguments must be a JSON object or a "
                        "string holding one",
                        i, k));
            }
        }
    }
    return Status::ok();
}

Result<std::string> ChatTemplate::render(const ChatRequest& req) const {
    GDN_RETURN_IF_ERROR(validate_messages(req.messages));
    // Content given as a list of parts is flattened to its text parts (text-only engine).
    Json messages = req.messages;
    for (Json& m : messages) {
        // OpenAI clients send an assistant turn that only calls tools with content null or without it;
        // templates test `"</think>" in message.content`, which fails on none (vLLM renders it as "" too).
        if (auto c = m.find("content"); c == m.end() || c->is_null()) m["content"] = "";
        if (m.contains("content") && m["content"].is_array()) {
            std::string text;
            for (const Json& part : m["content"]) {
                if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
                    !part["text"].is_string())
                    return Status::error("only text content parts are supported");
                text += part["text"].get<std::string>();
            }
            m["content"] = text;
        }
        if (auto tc = m.find("tool_calls"); tc != m.end() && tc->is_array())
            for (Json& call : *tc) {
                Json& f = call["function"];
                f["arguments"] = *arguments_object(f["arguments"]);  // validated above
            }
    }
    jinja::Value ctx{jinja::Object{}};
    if (req.extra.is_object())
        for (auto it = req.extra.begin(); it != req.extra.end(); ++it)
            ctx.set(it.key(), jinja::Value::from_json(it.value()));
    ctx.set("messages", jinja::Value::from_json(messages));
    ctx.set("add_generation_prompt", jinja::Value(req.add_generation_prompt));
    ctx.set("bos_token", jinja::Value(bos_));
    ctx.set("eos_token", jinja::Value(eos_));
    if (req.enable_thinking.has_value()) ctx.set("enable_thinking", jinja::Value(*req.enable_thinking));
    if (!req.tools.is_null()) ctx.set("tools", jinja::Value::from_json(req.tools));
    return tmpl_.render(ctx);
}

Result<std::string> render_chat_from_json(const Tokenizer& tok, const std::string& text) {
    GDN_ASSIGN_OR_RETURN(Json j, parse_json(text, "chat messages"));
    ChatRequest req;
    if (j.is_array()) {
        req.messages = j;
    } else if (j.is_object() && j.contains("messages")) {
        req.messages = j["messages"];
        if (j.contains("enable_thinking")) {
            if (!j["enable_thinking"].is_boolean())
                return Status::error("'enable_thinking' must be true or false");
            req.enable_thinking = j["enable_thinking"].get<bool>();
        }
        if (j.contains("add_generation_prompt") && j["add_generation_prompt"].is_boolean())
            req.add_generation_prompt = j["add_generation_prompt"].get<bool>();
        if (j.contains("tools")) req.tools = j["tools"];
    } else {
        return Status::error("expected a JSON list of messages or an object with 'messages'");
    }
    GDN_ASSIGN_OR_RETURN(auto ct, ChatTemplate::create(tok));
    return ct->render(req);
}

}  // namespace gdn
