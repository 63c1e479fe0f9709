// Renders tool-bearing conversations with @huggingface/jinja (the reference renderer) into
// tests/data/chat_templates/expected_tools.json. The messages are stored as an OpenAI client sends
// them (tool-call arguments as JSON strings, content null beside tool calls); the reference renders
// them as HF transformers users pass them (arguments parsed to objects, null content as ""), which is
// the normalisation ChatTemplate::render applies. Run: scripts/gen-fixtures (or node this file).
import { Template } from "@huggingface/jinja";
import fs from "node:fs";
import path from "node:path";

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..");
const tmplDir = path.join(root, "tests/data/chat_templates");

const tools = [
  { type: "function", function: { name: "get_weather", description: "Weather for a city — today or later",
      parameters: { type: "object", properties: { city: { type: "string", description: "e.g. Zürich" },
        days: { type: "integer" }, units: { type: "string", enum: ["metric", "imperial"] } }, required: ["city"] } } },
  { type: "function", function: { name: "now", description: "The current time", parameters: { type: "object", properties: {} } } },
];
const call = (id, name, args) => ({ id, type: "function", function: { name, arguments: JSON.stringify(args) } });
const conversations = {
  tools_first_turn: { tools, messages: [
    { role: "system", content: "You are terse." },
    { role: "user", content: "Weather in Oslo?" } ] },
  tools_no_system: { tools, messages: [{ role: "user", content: "What time is it?" }] },
  tools_calls_and_results: { tools, messages: [
    { role: "user", content: "Weather in Oslo and Rome for 2 days?" },
    { role: "assistant", content: "Let me check.", tool_calls: [
        call("c1", "get_weather", { city: "Oslo", days: 2 }),
        call("c2", "get_weather", { city: "Rome", days: 2, units: "metric" }) ] },
    { role: "tool", tool_call_id: "c1", content: "{\"sky\": \"rain\"}" },
    { role: "tool", tool_call_id: "c2", content: "sunny\n24 C" },
    { role: "assistant", content: "Oslo: rain. Rome: sunny." },
    { role: "user", content: "And the time?" } ] },
  tools_call_without_text: { tools, messages: [
    { role: "user", content: "Time?" },
    { role: "assistant", content: null, tool_calls: [call("c1", "now", {})] },
    { role: "tool", tool_call_id: "c1", content: "12:00" } ] },
  reasoning_kept_and_dropped: { tools, messages: [
    { role: "user", content: "Q1" },
    { role: "assistant", reasoning_content: "old thoughts", content: "A1" },
    { role: "user", content: "Q2" },
    { role: "assistant", reasoning_content: "new thoughts", content: "", tool_calls: [call("c9", "get_weather", { city: "Lima" })] },
    { role: "tool", tool_call_id: "c9", content: "fog" } ] },
};

function normalise(messages) {
  return messages.map((m) => {
    const n = { ...m };
    if (n.content === null) n.content = "";
    if (n.tool_calls) n.tool_calls = n.tool_calls.map((c) => ({ ...c, function: { ...c.function,
        arguments: typeof c.function.arguments === "string" ? JSON.parse(c.function.arguments) : c.function.arguments } }));
    return n;
  });
}

const out = [];
for (const t of ["qwen3", "qwen3_5_style"]) {
  const tmpl = new Template(fs.readFileSync(path.join(tmplDir, `${t}.jinja`), "utf8"));
  for (const [name, conv] of Object.entries(conversations)) {
    for (const gen of [true, false]) {
      for (const thinking of [undefined, true, false]) {
        const vars = { messages: normalise(conv.messages), tools: conv.tools, add_generation_prompt: gen, bos_token: "",
                       eos_token: "<|im_end|>" };
        if (thinking !== undefined) vars.enable_thinking = thinking;
        out.push({ template: t, conversation: name, messages: conv.messages, tools: conv.tools, add_generation_prompt: gen,
                   enable_thinking: thinking ?? null, expected: tmpl.render(vars) });
      }
    }
  }
}
fs.writeFileSync(path.join(tmplDir, "expected_tools.json"), JSON.stringify(out, null, 1));
console.log(`tools: ${out.length} renderings`);
