// Chat messages -> prompt text through the checkpoint's own Jinja chat template.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "tokenizer/jinja.h"
#include "tokenizer/tokenizer.h"
#include "util/json_file.h"

namespace gdn {

struct ChatRequest {
    Json messages = Json::array();  // [{"role": ..., "content": ...}, ...]
    bool add_generation_prompt = true;
    std::optional<bool> enable_thinking;  // unset: the template's default
    Json tools;                           // null or a list of tool definitions
    Json extra = Json::object();          // further template variables (chat_template_kwargs)
};

class ChatTemplate {
  public:
    // Parses the tokenizer's template; an error if the checkpoint has none or it does not parse.
    static Result<std::shared_ptr<const ChatTemplate>> create(const Tokenizer& tok);
    static Result<std::shared_ptr<const ChatTemplate>> from_source(const std::string& source, std::string bos,
                                                                   std::string eos);
    // The template reads `tools` (renders tool definitions): a request's tools would be lost otherwise.
    bool renders_tools() const { return renders_tools_; }
    Result<std::string> render(const ChatRequest& req) const;

  private:
    jinja::Template tmpl_;
    std::string bos_, eos_;
    bool renders_tools_ = false;
};

// Validates the message list (a list of objects with a string "role") with a clear error.
Status validate_messages(const Json& messages);

// For `gdn tokenize --chat`: `text` is a JSON list of messages or {"messages": [...], "enable_thinking": b}.
Result<std::string> render_chat_from_json(const Tokenizer& tok, const std::string& text);

}  // namespace gdn
