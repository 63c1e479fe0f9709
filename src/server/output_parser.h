// A chat answer's text -> reasoning, content and tool calls, incrementally: the streamed deltas and the
// one-shot answer come from the same parser, so they agree at every split of the text (the test cuts
// the output everywhere).
//
// The forms (Qwen3 / Qwen3.5 / Qwen3-Next chat templates):
//   reasoning:  <think>\n ... \n</think>\n\n answer     (or the prompt already opened <think>)
//   XML call:
//   <tool_call>\n<function=NAME>\n<parameter=ARG>\nVALUE\n</parameter>\n...</function>\n</tool_call> Hermes:
//   <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>
// Both call forms are accepted whichever the template writes (models drift between them). Text that
// looks like a call but is not one stays content; a call cut off by max_tokens keeps what was generated
// (its arguments unclosed, as OpenAI returns a truncated call; cut_parameter, cut_hermes_call). A <tool_call>
// inside an unclosed think block ends the reasoning: the call is kept, not lost in the reasoning text.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "server/tool_schema.h"

namespace gdn {

struct OutputParserOptions {
    bool reasoning = false;            // split <think>...</think> into reasoning_content
    bool starts_in_reasoning = false;  // the prompt opened <think> and left it open
    const ToolSet* tools = nullptr;    // non-empty: parse tool calls (typed by these schemas)
    std::string id_prefix = "call_";   // tool-call ids: id_prefix + index
};

// One piece of a tool call: the first names it (id and name set, arguments empty); later ones carry
// argument text to append. Concatenated, a call's fragments are its arguments as JSON text.
struct ToolCallDelta {
    int index = 0;
    std::string id, name;
    std::string arguments;
};

struct OutputDelta {
    std::string reasoning, content;
    std::vector<ToolCallDelta> tool_calls;
    bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

class OutputParser {
  public:
    explicit OutputParser(OutputParserOptions opts);
    OutputDelta feed(std::string_view text);
    // The end of the output: text held back (a possible tag start, whitespace before a call) is released.
    OutputDelta finish();
    int complete_calls() const { return complete_calls_; }
    int started_calls() const { return next_index_; }

  private:
    enum class Mode { START, REASONING, CONTENT, CALL_HEAD, CALL_XML, CALL_XML_END, CALL_HERMES, AFTER_CALL };
    bool step(OutputDelta& d, bool final);
    bool step_reasoning(OutputDelta& d, bool final);
    bool step_content(OutputDelta& d, bool final);
    bool step_call_head(OutputDelta& d, bool final);
    bool step_call_xml(OutputDelta& d, bool final);
    bool step_call_hermes(OutputDelta& d, bool final);
    bool step_after_call(OutputDelta& d, bool final);
    void degrade(OutputDelta& d);  // a would-be call that is not one: its text so far is content
    // The output ended inside a call (max_tokens): what was generated stays the call's, unclosed, as
    // OpenAI returns a truncated call. A parameter cut inside its value joins the arguments with the
    // value so far (a string value left open); a Hermes call whose name is complete and whose arguments
    // have started is a call with the argument text so far (false: not even that, it stays text).
    void cut_parameter(OutputDelta& d, std::string_view param, std::string_view value);
    bool cut_hermes_call(OutputDelta& d);
    void start_call(OutputDelta& d, std::string name);
    bool tools() const { return opts_.tools && !opts_.tools->empty(); }

    OutputParserOptions opts_;
    Mode mode_;
    std::string buf_;  // text not yet decided
    bool skip_newlines_ = false;
    std::string call_raw_;  // the text of the call being read, for degrade()
    std::string call_name_;
    bool args_open_ = false;
    int next_index_ = 0, complete_calls_ = 0;
};

// Which parsers a server runs, from --reasoning-parser and --tool-call-parser ("auto": read from the chat
// template: <think> in it means the qwen3 reasoning parser; <function= the qwen3_coder (XML) tool
// parser, else <tool_call> the hermes one). Names as vLLM's; an unknown name is an error.
struct ParserChoice {
    std::string reasoning = "none", tool_calls = "none";
    bool reasoning_on() const { return reasoning != "none"; }
    bool tool_calls_on() const { return tool_calls != "none"; }
};
Result<ParserChoice> choose_parsers(std::string_view chat_template, const std::string& reasoning_parser,
                                    const std::string& tool_call_parser);

// The answer the deltas add up to (what a non-streaming response carries).
struct ParsedOutput {
    struct Call {
        std::string id, name, arguments;
    };
    std::string reasoning, content;
    std::vector<Call> calls;
    void add(const OutputDelta& d);
};

}  // namespace gdn
