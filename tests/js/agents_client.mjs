// Agent clients against a real `gdn serve` (the demo model with the Qwen3.5-style test template, which
// renders tools): the official openai npm client (a forced tool call -> the tool's result -> a final
// answer, streamed and not; response_format json_schema; reasoning fields) and the Vercel AI SDK
// (generateText with a tool, generateObject with a schema, through @ai-sdk/openai-compatible).
// Usage: node agents_client.mjs <path to gdn> <model dir> <chat template>
import OpenAI from "openai";
import { generateText, generateObject, tool, stepCountIs } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { z } from "zod";
import { startServer, makeChecker, assert } from "./serve.mjs";

const [gdn, modelDir, template] = process.argv.slice(2);
const server = await startServer(gdn, modelDir, ["--chat-template", template,
                                                 "--default-chat-template-kwargs", '{"enable_thinking": false}']);
const baseURL = `http://127.0.0.1:${server.port}/v1`;
const client = new OpenAI({ apiKey: "test-key", baseURL });
const { check, counts } = makeChecker();

const tools = [{ type: "function", function: { name: "get_weather", description: "Weather for a city",
  parameters: { type: "object", properties: { city: { type: "string", enum: ["Oslo", "Rome", "Lima"] },
                                              days: { type: "integer" } }, required: ["city", "days"] } } }];
const ask = [{ role: "user", content: "What is the weather in Oslo?" }];

await check("openai: tool_choice required -> a parsed call -> a tool message -> a final answer", async () => {
  const first = await client.chat.completions.create({ model: "demo", messages: ask, tools, tool_choice: "required",
                                                       temperature: 0.7, seed: 1, max_tokens: 200 });
  const choice = first.choices[0];
  assert(choice.finish_reason === "tool_calls", `finish ${choice.finish_reason}: ${JSON.stringify(choice.message)}`);
  const call = choice.message.tool_calls[0];
  assert(call.id && call.type === "function" && call.function.name === "get_weather", JSON.stringify(call));
  const args = JSON.parse(call.function.arguments);
  assert(["Oslo", "Rome", "Lima"].includes(args.city) && Number.isInteger(args.days), call.function.arguments);
  const messages = [...ask, choice.message, { role: "tool", tool_call_id: call.id, content: "rain, 8 C" }];
  const final = await client.chat.completions.create({ model: "demo", messages, tools, temperature: 0, max_tokens: 40 });
  const m = final.choices[0].message;
  assert(typeof m.content === "string" && m.content.length > 0 && !m.tool_calls, JSON.stringify(m));
  assert(final.usage.prompt_tokens > first.usage.prompt_tokens, "the tool round trip is in the prompt");
});

await check("openai: the streamed call folds to the non-streamed one", async () => {
  const args = { model: "demo", messages: ask, tools, tool_choice: { type: "function", function: { name: "get_weather" } },
                 temperature: 1.0, seed: 9, max_tokens: 200 };
  const whole = (await client.chat.completions.create(args)).choices[0];
  const stream = await client.chat.completions.create({ ...args, stream: true });
  const calls = [];
  let finish = null;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    finish = c.finish_reason ?? finish;
    for (const t of c.delta.tool_calls ?? []) {
      if (t.id) calls[t.index] = { id: t.id, name: t.function.name, arguments: "" };
      calls[t.index].arguments += t.function.arguments ?? "";
    }
  }
  assert(finish === "tool_calls" && whole.finish_reason === "tool_calls", `${finish} ${whole.finish_reason}`);
  assert(calls.length === whole.message.tool_calls.length, `${calls.length} calls streamed`);
  calls.forEach((c, i) => {
    const w = whole.message.tool_calls[i];
    // Ids differ (each response has its own); names and argument text agree.
    assert(c.id && c.name === w.function.name && c.arguments === w.function.arguments,
           `${JSON.stringify(c)} != ${JSON.stringify(w)}`);
  });
});

await check("openai: response_format json_schema", async () => {
  const schema = { type: "object", properties: { fortune: { type: "string", maxLength: 40 }, stars: { type: "integer" } },
                   required: ["fortune", "stars"], additionalProperties: false };
  const r = await client.chat.completions.create({ model: "demo", messages: [{ role: "user", content: "Tell me a fortune." }],
    response_format: { type: "json_schema", json_schema: { name: "fortune", schema, strict: true } }, temperature: 1.0,
    seed: 4, max_tokens: 200 });
  const v = JSON.parse(r.choices[0].message.content);
  assert(typeof v.fortune === "string" && [...v.fortune].length <= 40 && Number.isInteger(v.stars), JSON.stringify(v));
  assert(Object.keys(v).join(",") === "fortune,stars", JSON.stringify(v));
});

await check("openai: reasoning_content beside content, thinking on and off", async () => {
  const on = await client.chat.completions.create({ model: "demo", messages: [{ role: "user", content: "Tell me a fortune." }],
    temperature: 0, max_tokens: 24, chat_template_kwargs: { enable_thinking: true } });
  const m = on.choices[0].message;
  assert(typeof m.reasoning_content === "string" && m.reasoning_content.length > 0, JSON.stringify(m));
  const off = await client.chat.completions.create({ model: "demo", messages: [{ role: "user", content: "Tell me a fortune." }],
    temperature: 0, max_tokens: 24 });
  assert(off.choices[0].message.reasoning_content === null && off.choices[0].message.content.length > 0,
         JSON.stringify(off.choices[0].message));
});

const provider = createOpenAICompatible({ name: "gdn", baseURL, apiKey: "test-key", supportsStructuredOutputs: true });

await check("ai sdk: generateText with a tool (forced, then answered)", async () => {
  let executed = null;
  const r = await generateText({
    model: provider("demo"), prompt: "What is the weather in Rome?", seed: 3, temperature: 0.7, maxOutputTokens: 200,
    tools: { get_weather: tool({ description: "Weather for a city",
                                 inputSchema: z.object({ city: z.enum(["Oslo", "Rome", "Lima"]), days: z.number().int() }),
                                 execute: async (input) => { executed = input; return { sky: "sunny" }; } }) },
    toolChoice: "required",
    prepareStep: ({ stepNumber }) => (stepNumber > 0 ? { toolChoice: "none" } : {}),
    stopWhen: stepCountIs(2),
  });
  assert(executed && ["Oslo", "Rome", "Lima"].includes(executed.city), `tool input ${JSON.stringify(executed)}`);
  assert(r.steps.length === 2 && r.steps[0].toolCalls.length >= 1, `${r.steps.length} steps`);
  assert(typeof r.text === "string" && r.text.length > 0, `final text ${JSON.stringify(r.text)}`);
});

await check("ai sdk: generateObject with a schema", async () => {
  const { object } = await generateObject({
    model: provider("demo"), prompt: "Tell me a fortune.", seed: 5, temperature: 1.0, maxOutputTokens: 200,
    schema: z.object({ fortune: z.string().max(30), lucky: z.number().int(), mood: z.enum(["good", "bad"]) }),
  });
  assert(typeof object.fortune === "string" && Number.isInteger(object.lucky) && ["good", "bad"].includes(object.mood),
         JSON.stringify(object));
});

server.stop();
console.log(`${counts.passed} passed, ${counts.failed} failed`);
process.exit(counts.failed ? 1 : 0);
