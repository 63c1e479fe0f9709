// The official openai npm client against a real `gdn serve` on loopback (started here, stopped at the end).
// Usage: node openai_client.mjs <path to gdn> <model dir>
import OpenAI from "openai";
import { startServer, makeChecker, assert } from "./serve.mjs";

const [gdn, modelDir] = process.argv.slice(2);
const server = await startServer(gdn, modelDir);
const client = new OpenAI({ apiKey: "test-key", baseURL: `http://127.0.0.1:${server.port}/v1` });
const { check, counts } = makeChecker();
const messages = [{ role: "user", content: "Tell me a fortune." }];

await check("chat completion with usage", async () => {
  const r = await client.chat.completions.create({ model: "demo", messages, temperature: 0, max_tokens: 60 });
  const text = r.choices[0].message.content;
  assert(text.includes("Mae West"), `unexpected text: ${text}`);
  assert(r.choices[0].finish_reason === "stop", r.choices[0].finish_reason);
  assert(r.usage.prompt_tokens === 13 && r.usage.total_tokens === 13 + r.usage.completion_tokens, JSON.stringify(r.usage));
});
await check("chat streaming equals non-streaming, usage in the last chunk", async () => {
  const args = { model: "demo", messages, temperature: 0.8, seed: 7, max_tokens: 40 };
  const whole = (await client.chat.completions.create(args)).choices[0].message.content;
  const stream = await client.chat.completions.create({ ...args, stream: true, stream_options: { include_usage: true } });
  let text = "", usage = null, finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    if (chunk.choices.length) {
      text += chunk.choices[0].delta.content ?? "";
      finish = chunk.choices[0].finish_reason ?? finish;
    }
  }
  assert(text === whole, `streamed ${JSON.stringify(text)} != ${JSON.stringify(whole)}`);
  assert(usage && usage.completion_tokens > 0, "no usage chunk");
  assert(finish !== null, "no finish_reason");
});
await check("completions, streaming and not", async () => {
  const r = await client.completions.create({ model: "demo", prompt: "The cat", max_tokens: 6, temperature: 0 });
  assert(r.choices[0].finish_reason === "length" && r.usage.completion_tokens === 6, JSON.stringify(r));
  const s = await client.completions.create({ model: "demo", prompt: "The cat", max_tokens: 6, temperature: 0, stream: true });
  let text = "";
  for await (const c of s) text += c.choices[0]?.text ?? "";
  assert(text === r.choices[0].text, `${JSON.stringify(text)} != ${JSON.stringify(r.choices[0].text)}`);
});
await check("stop string", async () => {
  const r = await client.chat.completions.create({ model: "demo", messages, temperature: 0, max_tokens: 60, stop: ["the best"] });
  assert(r.choices[0].message.content === "The only thing about the world is that it is ", JSON.stringify(r.choices[0].message.content));
  assert(r.choices[0].finish_reason === "stop", r.choices[0].finish_reason);
});
await check("a seed gives the same output twice", async () => {
  const args = { model: "demo", messages, temperature: 1.0, top_p: 0.95, seed: 1234, max_tokens: 30 };
  const a = (await client.chat.completions.create(args)).choices[0].message.content;
  const b = (await client.chat.completions.create(args)).choices[0].message.content;
  assert(a === b, `${JSON.stringify(a)} != ${JSON.stringify(b)}`);
});
await check("errors surface as API errors", async () => {
  try {
    await client.chat.completions.create({ model: "demo", messages, top_p: 2 });
    throw new Error("no error");
  } catch (e) {
    assert(e.status === 400 && /top_p/.test(e.message), `${e.status} ${e.message}`);
  }
});

server.stop();
const code = await server.exited;
await check("graceful shutdown exits 0", async () => assert(code === 0, `exit code ${code}`));
console.log(`${counts.passed} passed, ${counts.failed} failed`);
process.exit(counts.failed ? 1 : 0);
