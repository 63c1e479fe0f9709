#include "server/output_parser.h"

#include <algorithm>

namespace gdn {

namespace {

constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>";
constexpr std::string_view kCallOpen = "<tool_call>", kCallClose = "</tool_call>";
constexpr std::string_view kFunction = "<function=", kFunctionClose = "</function>";
constexpr std::string_view kParam = "<parameter=", kParamClose = "</parameter>";
constexpr size_t kMaxNameBytes = 256;  // a longer "<function=..." is text, not a call

bool is_space(char c) {
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

bool starts_with(std::string_view s, std::string_view p) {
    return s.substr(0, p.size()) == p;
}

// `s` could still grow into `tag` (it is a prefix of it; the empty string is).
bool may_become(std::string_view s, std::string_view tag) {
    return s.size() < tag.size() && starts_with(tag, s);
}

// The longest suffix of `s` that is a proper prefix of `tag`: text that may be the start of the tag.
size_t partial_tag(std::string_view s, std::string_view tag) {
    for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
        if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
    return 0;
}

size_t leading_spaces(std::string_view s) {
    size_t i = 0;
    while (i < s.size() && is_space(s[i])) ++i;
    return i;
}

std::string_view trim(std::string_view s) {
    s.remove_prefix(leading_spaces(s));
    while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
    return s;
}

}  // namespace

OutputParser::OutputParser(OutputParserOptions opts) : opts_(std::move(opts)) {
    if (!opts_.reasoning)
        mode_ = Mode::CONTENT;
    else if (opts_.starts_in_reasoning)
        mode_ = Mode::REASONING, skip_newlines_ = true;
    else
        mode_ = Mode::START;
}

OutputDelta OutputParser::feed(std::string_view text) {
    buf_.append(text);
    OutputDelta d;
    while (step(d, false)) {
    }
    return d;
}

OutputDelta OutputParser::finish() {
    OutputDelta d;
    while (step(d, true)) {
    }
    return d;
}

// One decision; true when it changed something and the next one may follow at once.
bool OutputParser::step(OutputDelta& d, bool final) {
    switch (mode_) {
        case Mode::START: {
            const std::string_view rest = std::string_view(buf_).substr(leading_spaces(buf_));
            if (starts_with(rest, kThinkOpen)) {
                buf_.erase(0, buf_.size() - rest.size() + kThinkOpen.size());
                mode_ = Mode::REASONING;
                skip_newlines_ = true;
                return true;
            }
            if (!final && may_become(rest, kThinkOpen)) return false;
            mode_ = Mode::CONTENT;
            return true;
        }
        case Mode::REASONING:
            return step_reasoning(d, final);
        case Mode::CONTENT:
            return step_content(d, final);
        case Mode::CALL_HEAD:
            return step_call_head(d, final);
        case Mode::CALL_XML:
            return step_call_xml(d, final);
        case Mode::CALL_XML_END: {
            const size_t i = leading_spaces(buf_);
            const std::string_view rest = std::string_view(buf_).substr(i);
            if (starts_with(rest, kCallClose)) {
                buf_.erase(0, i + kCallClose.size());
            } else if (!final && may_become(rest, kCallClose)) {
                return false;
            }
            mode_ = Mode::AFTER_CALL;  // a missing </tool_call> after </function> is forgiven
            return true;
        }
        case Mode::CALL_HERMES:
            return step_call_hermes(d, final);
        case Mode::AFTER_CALL:
            return step_after_call(d, final);
    }
    return false;
}

bool OutputParser::step_reasoning(OutputDelta& d, bool final) {
    if (skip_newlines_) {  // "<think>\n" opens the block
        size_t i = 0;
        while (i < buf_.size() && buf_[i] == '\n') ++i;
        buf_.erase(0, i);
        if (buf_.empty()) return false;
        skip_newlines_ = false;
    }
    const size_t close = buf_.find(kThinkClose);
    const size_t call = tools() ? buf_.find(kCallOpen) : std::string::npos;
    const size_t at = std::min(close, call);
    if (at != std::string::npos) {
        std::string_view text(buf_.data(), at);
        while (!text.empty() && text.back() == '\n') text.remove_suffix(1);  // "\n</think>" closes it
        d.reasoning.append(text);
        if (at == close) {
            buf_.erase(0, at + kThinkClose.size());
            mode_ = Mode::CONTENT;
            skip_newlines_ = true;  // "</think>\n\n" then the answer
        } else {
            buf_.erase(0, at + kCallOpen.size());
            call_raw_ = std::string(kCallOpen);
            mode_ = Mode::CALL_HEAD;
        }
        return true;
    }
    size_t hold = 0;
    if (!final) {
        hold = std::max(partial_tag(buf_, kThinkClose), tools() ? partial_tag(buf_, kCallOpen) : 0);
        while (hold < buf_.size() && buf_[buf_.size() - hold - 1] == '\n') ++hold;
    }
    d.reasoning.append(buf_, 0, buf_.size() - hold);
    buf_.erase(0, buf_.size() - hold);
    return false;
}

bool OutputParser::step_content(OutputDelta& d, bool final) {
    if (skip_newlines_) {
        size_t i = 0;
        while (i < buf_.size() && buf_[i] == '\n') ++i;
        buf_.erase(0, i);
        if (buf_.empty()) return false;
        skip_newlines_ = false;
    }
    if (!tools()) {
        d.content += buf_;
        buf_.clear();
        return false;
    }
    if (const size_t call = buf_.find(kCallOpen); call != std::string::npos) {
        size_t text_end = call;  // whitespace between the text and its first call is neither
        while (text_end > 0 && is_space(buf_[text_end - 1])) --text_end;
        d.content.append(buf_, 0, text_end);
        call_raw_ = buf_.substr(text_end, call - text_end + kCallOpen.size());
        buf_.erase(0, call + kCallOpen.size());
        mode_ = Mode::CALL_HEAD;
        return true;
    }
    size_t hold = 0;
    if (!final) {
        hold = partial_tag(buf_, kCallOpen);
        while (hold < buf_.size() && is_space(buf_[buf_.size() - hold - 1])) ++hold;
    }
    d.content.append(buf_, 0, buf_.size() - hold);
    buf_.erase(0, buf_.size() - hold);
    return false;
}

void OutputParser::degrade(OutputDelta& d) {
    d.content += call_raw_;
    call_raw_.clear();
    mode_ = Mode::CONTENT;
    skip_newlines_ = false;
}

void OutputParser::start_call(OutputDelta& d, std::string name) {
    ToolCallDelta t;
    t.index = next_index_++;
    t.id = opts_.id_prefix + std::to_string(t.index);
    t.name = name;
    d.tool_calls.push_back(std::move(t));
    call_name_ = std::move(name);
    args_open_ = false;
    call_raw_.clear();
}

bool OutputParser::step_call_head(OutputDelta& d, bool final) {
    const size_t i = leading_spaces(buf_);
    const std::string_view rest = std::string_view(buf_).substr(i);
    if (starts_with(rest, kFunction)) {
        const size_t gt = rest.find('>', kFunction.size());
        const std::string_view name = rest.substr(
            kFunction.size(), gt == std::string_view::npos ? std::string_view::npos : gt - kFunction.size());
        const bool bad = name.find_first_of("<\n") != std::string_view::npos || name.size() > kMaxNameBytes ||
                         (gt != std::string_view::npos && name.empty());
        if (!bad && gt == std::string_view::npos && !final) return false;
        if (bad || gt == std::string_view::npos) {
            degrade(d);
            return true;
        }
        std::string n(name);
        buf_.erase(0, i + gt + 1);
        start_call(d, std::move(n));
        mode_ = Mode::CALL_XML;
        return true;
    }
    if (!rest.empty() && rest[0] == '{') {
        call_raw_.append(buf_, 0, i);
        buf_.erase(0, i);
        mode_ = Mode::CALL_HERMES;
        return true;
    }
    if (!final && (may_become(rest, kFunction))) return false;
    degrade(d);
    return true;
}

bool OutputParser::step_call_xml(OutputDelta& d, bool final) {
    const size_t i = leading_spaces(buf_);
    const std::string_view rest = std::string_view(buf_).substr(i);
    const int index = next_index_ - 1;
    auto close_arguments = [&](size_t consumed, Mode next) {
        d.tool_calls.push_back({index, "", "", args_open_ ? "}" : "{}"});
        complete_calls_++;
        buf_.erase(0, consumed);
        mode_ = next;
    };
    if (starts_with(rest, kParam)) {
        const size_t gt = rest.find('>', kParam.size());
        if (gt == std::string_view::npos) return false;  // wait (or, at the end, the call stays cut off)
        const size_t close = rest.find(kParamClose, gt + 1);
        if (close == std::string_view::npos) {
            if (final) cut_parameter(d, rest.substr(kParam.size(), gt - kParam.size()), rest.substr(gt + 1));
            return false;
        }
        const std::string_view param = rest.substr(kParam.size(), gt - kParam.size());
        std::string_view value = rest.substr(gt + 1, close - gt - 1);
        if (starts_with(value, "\n")) value.remove_prefix(1);  // "<parameter=ARG>\nVALUE\n</parameter>"
        if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
        std::string frag = args_open_ ? "," : "{";
        frag += to_json_text(Json(std::string(param)));
        frag += ':';
        frag += opts_.tools->typed_value(call_name_, param, std::string(value));
        args_open_ = true;
        d.tool_calls.push_back({index, "", "", std::move(frag)});
        buf_.erase(0, i + close + kParamClose.size());
        return true;
    }
    if (starts_with(rest, kFunctionClose)) {
        close_arguments(i + kFunctionClose.size(), Mode::CALL_XML_END);
        return true;
    }
    if (starts_with(rest, kCallClose)) {
        close_arguments(i + kCallClose.size(), Mode::AFTER_CALL);
        return true;
    }
    if (final) return false;  // cut off inside the call: it keeps the arguments it had
    if (may_become(rest, kParam) || may_become(rest, kFunctionClose) || may_become(rest, kCallClose))
        return false;
    // Stray text between parameters is not an argument: skipped up to the next tag.
    const size_t lt = rest.find('<', 1);
    buf_.erase(0, lt == std::string_view::npos ? buf_.size() : i + lt);
    return true;
}

bool OutputParser::step_call_hermes(OutputDelta& d, bool final) {
    const size_t close = buf_.find(kCallClose);
    if (close == std::string::npos) {
        if (!final) return false;
        if (!cut_hermes_call(d)) degrade(d);  // not even a named call: the unfinished JSON is text
        return true;
    }
    auto j = parse_json(std::string(trim(std::string_view(buf_).substr(0, close))), "tool call");
    const Json* args = nullptr;
    Json parsed_args;
    bool ok = j && j->is_object() && j->contains("name") && (*j)["name"].is_string() &&
              !(*j)["name"].get<std::string>().empty();
    if (ok) {
        for (const char* key : {"arguments", "parameters"})
            if (auto it = j->find(key); it != j->end()) {
                args = &*it;
                break;
            }
        if (args && args->is_string()) {  // arguments given as a JSON string (OpenAI's wire form)
            auto inner = parse_json(args->get<std::string>(), "tool call arguments");
            ok = inner && inner->is_object();
            if (ok) parsed_args = std::move(*inner), args = &parsed_args;
        } else if (args) {
            ok = args->is_object();
        }
    }
    if (!ok) {
        call_raw_.append(buf_, 0, close + kCallClose.size());
        buf_.erase(0, close + kCallClose.size());
        degrade(d);
        return true;
    }
    start_call(d, (*j)["name"].get<std::string>());
    d.tool_calls.push_back({next_index_ - 1, "", "", args ? to_json_text(*args) : "{}"});
    complete_calls_++;
    buf_.erase(0, close + kCallClose.size());
    mode_ = Mode::AFTER_CALL;
    return true;
}

void OutputParser::cut_parameter(OutputDelta& d, std::string_view param, std::string_view value) {
    if (starts_with(value, "\n")) value.remove_prefix(1);
    value.remove_suffix(partial_tag(value, "\n</parameter>"));
    std::string typed = opts_.tools->typed_value(call_name_, param, std::string(value));
    if (!typed.empty() && typed[0] == '"')
        typed.pop_back();  // a string value stays open
    else
        typed = std::string(value);  // a number or an object cut short: the text as generated
    std::string frag = args_open_ ? "," : "{";
    frag += to_json_text(Json(std::string(param)));
    frag += ':';
    frag += typed;
    args_open_ = true;
    d.tool_calls.push_back({next_index_ - 1, "", "", std::move(frag)});
    buf_.clear();
}

bool OutputParser::cut_hermes_call(OutputDelta& d) {
    std::string_view s = buf_;
    s.remove_suffix(partial_tag(s, kCallClose));
    s = trim(s);
    size_t i = 0;
    auto punct = [&](char c) {
        i += leading_spaces(s.substr(i));
        return i < s.size() && s[i] == c ? (++i, true) : false;
    };
    auto string = [&](std::string* out) {  // a complete JSON string
        i += leading_spaces(s.substr(i));
        if (i >= s.size() || s[i] != '"') return false;
        size_t j = i + 1;
        while (j < s.size() && s[j] != '"') j += s[j] == '\\' ? 2 : 1;
        if (j >= s.size()) return false;
        auto v = parse_json(std::string(s.substr(i, j + 1 - i)), "tool call");
        if (!v || !v->is_string()) return false;
        *out = v->get<std::string>();
        i = j + 1;
        return true;
    };
    std::string key, name;
    if (!punct('{') || !string(&key) || key != "name" || !punct(':') || !string(&name) || name.empty() ||
        !punct(',') || !string(&key) || (key != "arguments" && key != "parameters") || !punct(':'))
        return false;
    std::string args(trim(s.substr(i)));
    if (args.empty() || args[0] != '{') return false;
    // Only the closing tag missing: the arguments are the object the call holds.
    if (auto whole = parse_json(std::string(s), "tool call"); whole && whole->is_object())
        if (auto a = whole->find(key); a != whole->end() && a->is_object()) args = to_json_text(*a);
    start_call(d, std::move(name));
    d.tool_calls.push_back({next_index_ - 1, "", "", std::move(args)});
    buf_.clear();
    mode_ = Mode::AFTER_CALL;
    return true;
}

bool OutputParser::step_after_call(OutputDelta&, bool final) {
    const size_t i = leading_spaces(buf_);
    const std::string_view rest = std::string_view(buf_).substr(i);
    if (starts_with(rest, kCallOpen)) {
        buf_.erase(0, i + kCallOpen.size());
        call_raw_ = std::string(kCallOpen);
        mode_ = Mode::CALL_HEAD;
        return true;
    }
    if (rest.empty()) {
        if (final) buf_.clear();  // whitespace after the last call is not content
        return false;
    }
    if (!final && may_become(rest, kCallOpen)) return false;
    buf_.erase(0, i);  // text after the calls is content
    mode_ = Mode::CONTENT;
    return true;
}

Result<ParserChoice> choose_parsers(std::string_view tmpl, const std::string& reasoning,
                                    const std::string& tools) {
    ParserChoice c;
    if (reasoning == "auto")
        c.reasoning = tmpl.find("<think>") != std::string_view::npos ? "qwen3" : "none";
    else if (reasoning == "qwen3" || reasoning == "none")
        c.reasoning = reasoning;
    else
        return Status::error("--reasoning-parser must be auto, qwen3 or none (got '" + reasoning + "')");
    if (tools == "auto") {
        c.tool_calls = tmpl.find("<function=") != std::string_view::npos    ? "qwen3_coder"
                       : tmpl.find("<tool_call>") != std::string_view::npos ? "hermes"
                                                                            : "none";
    } else if (tools == "qwen3_coder" || tools == "qwen3_xml" || tools == "hermes" || tools == "none") {
        c.tool_calls = tools;
    } else {
        return Status::error(
            "--tool-call-parser must be auto, qwen3_coder, qwen3_xml, hermes or none (got '" + tools + "')");
    }
    return c;
}

void ParsedOutput::add(const OutputDelta& d) {
    reasoning += d.reasoning;
    content += d.content;
    for (const ToolCallDelta& t : d.tool_calls) {
        if (!t.id.empty()) calls.push_back({t.id, t.name, ""});
        if (t.index >= 0 && static_cast<size_t>(t.index) < calls.size())
            calls[t.index].arguments += t.arguments;
    }
}

}  // namespace gdn
