#include "tokenizer/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <mutex>
#include <queue>
#include <unordered_map>

#include "core/log.h"
#include "tokenizer/unicode.h"
#include "util/json_file.h"

namespace gdn {

namespace {

// GPT-2's pre-tokenizer regex, used by ByteLevel(use_regex = true).
const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Oniguruma's \s is Unicode White_Space, which includes U+0085; PCRE2's (with UCP) does not.
std::string widen_whitespace(const std::string& p) {
    std::string out;
    bool in_class = false;
    for (size_t i = 0; i < p.size(); ++i) {
        const char c = p[i];
        if (c == '\\' && i + 1 < p.size()) {
            const char e = p[i + 1];
            if (e == 's')
                out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
            else if (e == 'S' && !in_class)
                out += "[^\\s\\x{85}]";
            else
                out += p.substr(i, 2);
            ++i;
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = true;
            out += c;
            if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
            if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // literal ] first in a class
            continue;
        }
        if (c == ']' && in_class) in_class = false;
        out += c;
    }
    return out;
}

struct Regex {
    pcre2_code* code = nullptr;
    ~Regex() {
        if (code) pcre2_code_free(code);
    }
};

Result<std::shared_ptr<Regex>> compile_regex(const std::string& pattern, bool literal,
                                             const std::string& origin) {
    auto r = std::make_shared<Regex>();
    int err = 0;
    PCRE2_SIZE off = 0;
    const std::string p = literal ? pattern : widen_whitespace(pattern);
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : 0);
    r->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), opts, &err, &off, nullptr);
    if (!r->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof(msg));
        return Status::error(strprintf("%s: cannot compile pre-tokenizer regex at offset %zu: %s",
                                       origin.c_str(), static_cast<size_t>(off),
                                       reinterpret_cast<char*>(msg)));
    }
    pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
    return r;
}

// Leftmost-longest matcher over a set of strings (the added tokens), as a byte trie.
class Trie {
  public:
    void add(const std::string& s, int32_t token_index) {
        int node = 0;
        for (unsigned char c : s) {
            if (nodes_[node].next[c] == 0) {
                nodes_[node].next[c] = static_cast<int>(nodes_.size());
                nodes_.emplace_back();
            }
            node = nodes_[node].next[c];
        }
        nodes_[node].token = token_index;
    }
    // Longest match starting at text[i]: returns (length, token index) or (0, -1).
    std::pair<size_t, int32_t> match(std::string_view text, size_t i) const {
        int node = 0;
        std::pair<size_t, int32_t> best{0, -1};
        for (size_t j = i; j < text.size(); ++j) {
            node = nodes_[node].next[static_cast<unsigned char>(text[j])];
            if (!node) break;
            if (nodes_[node].token >= 0) best = {j - i + 1, nodes_[node].token};
        }
        return best;
    }
    bool empty() const { return nodes_.size() == 1; }

  private:
    struct Node {
        std::array<int, 256> next{};
        int32_t token = -1;
    };
    std::vector<Node> nodes_ = std::vector<Node>(1);
};

struct PreStep {
    enum Kind { SPLIT_ISOLATED, SPLIT_REMOVED, BYTE_LEVEL } kind;
    std::shared_ptr<Regex> regex;  // SPLIT_*, or BYTE_LEVEL with use_regex
    bool add_prefix_space = false;
};

// A section of the input: either an added token or text to pre-tokenize.
struct Section {
    std::string_view text;
    int32_t added = -1;  // index into added tokens
};

std::vector<Section> split_added(std::string_view text, const Trie& trie) {
    std::vector<Section> out;
    if (trie.empty()) {
        out.push_back({text, -1});
        return out;
    }
    size_t start = 0, i = 0;
    while (i < text.size()) {
        auto [len, tok] = trie.match(text, i);
        if (len) {
            if (i > start) out.push_back({text.substr(start, i - start), -1});
            out.push_back({text.substr(i, len), tok});
            i += len;
            start = i;
        } else {
            ++i;
        }
    }
    if (start < text.size()) out.push_back({text.substr(start), -1});
    return out;
}

bool is_js_space(uint32_t cp) {  // what String.prototype.trim removes
    return cp == 0x09 || cp == 0x0A || cp == 0x0B || cp == 0x0C || cp == 0x0D || cp == 0x20 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
}

std::string_view trim_start(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        size_t j = i;
        if (!is_js_space(utf8_next(s, &j))) break;
        i = j;
    }
    return s.substr(i);
}

std::string_view trim_end(std::string_view s) {
    size_t end = s.size();
    while (end > 0) {
        size_t b = end - 1;
        while (b > 0 && (static_cast<uint8_t>(s[b]) & 0xC0) == 0x80) --b;
        size_t j = b;
        if (!is_js_space(utf8_next(s, &j))) break;
        end = b;
    }
    return s.substr(0, end);
}

}  // namespace

struct Tokenizer::Impl {
    std::unordered_map<std::string, int32_t> token_to_id;
    std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // (left, right) -> (rank, merged id)
    std::array<int32_t, 256> byte_id{};                                // id of each byte's symbol
    std::vector<AddedToken> added;
    Trie raw_trie, normalized_trie;
    bool nfc = false;
    bool ignore_merges = false;
    std::vector<PreStep> steps;

    mutable std::mutex cache_mu;
    mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

    void bpe(std::string_view piece, std::vector<int32_t>* out) const;
    void pretokenize_and_bpe(std::string_view text, std::vector<int32_t>* out) const;
    void encode_normalized_section(std::string_view text, std::vector<int32_t>* out) const;
};

// Byte-level BPE of one pre-token: lowest merge rank first, leftmost among equal ranks.
void Tokenizer::Impl::bpe(std::string_view piece, std::vector<int32_t>* out) const {
    if (piece.empty()) return;
    const bool cacheable = piece.size() < 256;
    if (cacheable) {
        std::lock_guard<std::mutex> lock(cache_mu);
        auto it = cache.find(std::string(piece));
        if (it != cache.end()) {
            out->insert(out->end(), it->second.begin(), it->second.end());
            return;
        }
    }
    std::vector<int32_t> sym;
    sym.reserve(piece.size());
    std::string mapped;
    for (unsigned char b : piece) {
        sym.push_back(byte_id[b]);
        if (ignore_merges) mapped += byte_symbol(b);
    }
    std::vector<int32_t> result;
    auto it_whole = ignore_merges ? token_to_id.find(mapped) : token_to_id.end();
    if (it_whole != token_to_id.end()) {
        result.push_back(it_whole->second);
    } else if (std::find(sym.begin(), sym.end(), -1) != sym.end()) {
        // A byte without a vocabulary symbol: nothing can merge through it; drop it like the reference.
        for (int32_t s : sym)
            if (s >= 0) result.push_back(s);
    } else {
        auto rank_of = [&](int32_t a, int32_t b) -> const std::pair<int32_t, int32_t>* {
            auto it =
                merges.find(static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32 | static_cast<uint32_t>(b));
            return it == merges.end() ? nullptr : &it->second;
        };
        const size_t n = sym.size();
        if (n <= 48) {
            // Short words: rescan for the best pair each round (fast for the common case).
            for (;;) {
                int32_t best_rank = INT32_MAX, best_id = -1;
                size_t best = 0;
                for (size_t i = 0; i + 1 < sym.size(); ++i) {
                    const auto* m = rank_of(sym[i], sym[i + 1]);
                    if (m && m->first < best_rank) {
                        best_rank = m->first;
                        best_id = m->second;
                        best = i;
                    }
                }
                if (best_id < 0) break;
                sym[best] = best_id;
                sym.erase(sym.begin() + best + 1);
            }
            result = std::move(sym);
        } else {
            // Long words: linked list + heap keyed by (rank, position), stale entries skipped.
            std::vector<int> prev(n), next(n);
            std::vector<uint8_t> alive(n, 1);
            for (size_t i = 0; i < n; ++i) {
                prev[i] = static_cast<int>(i) - 1;
                next[i] = i + 1 < n ? static_cast<int>(i) + 1 : -1;
            }
            using Entry = std::tuple<int32_t, int, int32_t, int32_t>;  // rank, left pos, left id, right id
            std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
            auto push = [&](int i) {
                if (i < 0 || next[i] < 0) return;
                if (const auto* m = rank_of(sym[i], sym[next[i]]))
                    heap.emplace(m->first, i, sym[i], sym[next[i]]);
            };
            for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int>(i));
            while (!heap.empty()) {
                auto [rank, i, a, b] = heap.top();
                heap.pop();
                if (!alive[i] || next[i] < 0 || sym[i] != a || sym[next[i]] != b) continue;  // stale
                const int j = next[i];
                sym[i] = rank_of(a, b)->second;
                alive[j] = 0;
                next[i] = next[j];
                if (next[j] >= 0) prev[next[j]] = i;
                push(prev[i]);
                push(i);
            }
            for (int i = 0; i >= 0; i = next[i]) result.push_back(sym[i]);
        }
    }
    out->insert(out->end(), result.begin(), result.end());
    if (cacheable) {
        std::lock_guard<std::mutex> lock(cache_mu);
        if (cache.size() > 200000) cache.clear();
        cache.emplace(std::string(piece), std::move(result));
    }
}

void Tokenizer::Impl::pretokenize_and_bpe(std::string_view text, std::vector<int32_t>* out) const {
    // Pieces are views into `text` (or into `prefixed` when a prefix space is added).
    std::string prefixed;
    std::vector<std::string_view> pieces{text}, next_pieces;
    pcre2_match_data* md = nullptr;
    for (const PreStep& st : steps) {
        if (st.kind == PreStep::BYTE_LEVEL && st.add_prefix_space && !pieces.empty() &&
            !(pieces[0].size() && pieces[0][0] == ' ')) {
            prefixed.assign(1, ' ');  // only the first piece (the reference's behaviour)
            prefixed.append(pieces[0]);
            pieces[0] = prefixed;
        }
        if (!st.regex) continue;
        if (!md) md = pcre2_match_data_create(8, nullptr);
        next_pieces.clear();
        for (std::string_view p : pieces) {
            size_t pos = 0, last = 0;
            while (pos <= p.size()) {
                int rc = pcre2_match(st.regex->code, reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), pos,
                                     PCRE2_NO_UTF_CHECK, md, nullptr);
                if (rc < 0) break;
                const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
                size_t s = ov[0], e = ov[1];
                if (e == s) {  // empty match: step one character forward
                    size_t k = pos;
                    if (k >= p.size()) break;
                    utf8_next(p, &k);
                    pos = k;
                    continue;
                }
                if (s > last) next_pieces.push_back(p.substr(last, s - last));
                if (st.kind != PreStep::SPLIT_REMOVED) next_pieces.push_back(p.substr(s, e - s));
                last = pos = e;
            }
            if (last < p.size()) next_pieces.push_back(p.substr(last));
        }
        pieces.swap(next_pieces);
    }
    if (md) pcre2_match_data_free(md);
    for (std::string_view p : pieces) bpe(p, out);
}

void Tokenizer::Impl::encode_normalized_section(std::string_view raw, std::vector<int32_t>* out) const {
    const std::string text = nfc ? gdn::nfc(raw) : std::string(raw);
    std::vector<Section> secs = split_added(text, normalized_trie);
    for (size_t i = 0; i < secs.size(); ++i) {
        if (secs[i].added < 0) continue;
        const AddedToken& t = added[secs[i].added];
        if (t.lstrip && i > 0 && secs[i - 1].added < 0) secs[i - 1].text = trim_end(secs[i - 1].text);
        if (t.rstrip && i + 1 < secs.size() && secs[i + 1].added < 0)
            secs[i + 1].text = trim_start(secs[i + 1].text);
    }
    for (const Section& s : secs) {
        if (s.added >= 0)
            out->push_back(added[s.added].id);
        else if (!s.text.empty())
            pretokenize_and_bpe(s.text, out);
    }
}

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view input) const {
    const std::string text = utf8_lossy(input);
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 4);
    std::vector<Section> secs = split_added(text, impl_->raw_trie);
    for (size_t i = 0; i < secs.size(); ++i) {
        if (secs[i].added < 0) continue;
        const AddedToken& t = impl_->added[secs[i].added];
        if (t.lstrip && i > 0 && secs[i - 1].added < 0) secs[i - 1].text = trim_end(secs[i - 1].text);
        if (t.rstrip && i + 1 < secs.size() && secs[i + 1].added < 0)
            secs[i + 1].text = trim_start(secs[i + 1].text);
    }
    for (const Section& s : secs) {
        if (s.added >= 0)
            out.push_back(impl_->added[s.added].id);
        else if (!s.text.empty())
            impl_->encode_normalized_section(s.text, &out);
    }
    return out;
}

void Tokenizer::append_token_bytes(int32_t id, std::string* bytes) const {
    const std::string& t = id_to_token_[id];
    size_t i = 0;
    const size_t start = bytes->size();
    while (i < t.size()) {
        int b = codepoint_to_byte(utf8_next(t, &i));
        if (b < 0) {  // not a byte-level symbol: the token's own UTF-8 (the reference's fallback)
            bytes->resize(start);
            bytes->append(t);
            return;
        }
        bytes->push_back(static_cast<char>(b));
    }
}

Result<std::string> Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
    StreamDecoder sd(std::shared_ptr<const Tokenizer>(std::shared_ptr<const Tokenizer>{}, this),
                     skip_special);
    std::string out;
    for (int32_t id : ids) {
        GDN_ASSIGN_OR_RETURN(std::string piece, sd.add(id));
        out += piece;
    }
    return out + sd.finish();
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
    auto it = impl_->token_to_id.find(std::string(token));
    if (it == impl_->token_to_id.end()) return std::nullopt;
    return it->second;
}

bool Tokenizer::is_special(int32_t id) const {
    return id >= 0 && id < vocab_size() && kind_[id] == 2;
}
bool Tokenizer::is_added(int32_t id) const {
    return id >= 0 && id < vocab_size() && kind_[id] >= 1;
}

StreamDecoder::StreamDecoder(std::shared_ptr<const Tokenizer> tok, bool skip_special)
    : tok_(std::move(tok)), skip_special_(skip_special) {}

Result<std::string> StreamDecoder::add(int32_t id) {
    if (id < 0 || id >= tok_->vocab_size())
        return Status::error(strprintf("token id %d is out of range [0, %d)", id, tok_->vocab_size()));
    if (tok_->kind_[id] == 2 && skip_special_)
        return std::string();  // dropped before decoding, as the reference
    if (tok_->kind_[id] >= 1) {
        // Added tokens end the current byte run and are emitted verbatim.
        std::string out = utf8_lossy(pending_);
        pending_.clear();
        return out + tok_->id_to_token_[id];
    }
    tok_->append_token_bytes(id, &pending_);
    const size_t keep = utf8_incomplete_tail(pending_);
    std::string out = utf8_lossy(std::string_view(pending_).substr(0, pending_.size() - keep));
    pending_.erase(0, pending_.size() - keep);
    return out;
}

std::string StreamDecoder::finish() {
    std::string out = utf8_lossy(pending_);
    pending_.clear();
    return out;
}

// ---------------------------------------------------------------------------------------------------
// Loading

namespace {

std::string token_content(const SortedJson& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string())
        return v["content"].get<std::string>();
    return "";
}

}  // namespace

Result<std::shared_ptr<const Tokenizer>> Tokenizer::load(const std::string& dir,
                                                         const std::string& chat_template) {
    const std::string path = dir + "/tokenizer.json";
    GDN_ASSIGN_OR_RETURN(std::string tj, read_text_file(path));
    std::string cj;
    if (file_exists(dir + "/tokenizer_config.json")) {
        GDN_ASSIGN_OR_RETURN(cj, read_text_file(dir + "/tokenizer_config.json"));
    }
    GDN_ASSIGN_OR_RETURN(auto tok, from_json(tj, cj, path));
    if (tok->chat_template_.empty() && file_exists(dir + "/chat_template.jinja")) {
        GDN_ASSIGN_OR_RETURN(std::string tmpl, read_text_file(dir + "/chat_template.jinja"));
        const_cast<Tokenizer&>(*tok).chat_template_ = tmpl;
    }
    if (!chat_template.empty()) const_cast<Tokenizer&>(*tok).chat_template_ = chat_template;
    return tok;
}

Result<std::shared_ptr<const Tokenizer>> Tokenizer::from_json(const std::string& tokenizer_json,
                                                              const std::string& config_json,
                                                              const std::string& origin) {
    // Every typed read below checks its type first; this catches the ones a hostile file still finds
    // (nlohmann's type_error / out_of_range), so a corrupt tokenizer is an error, never an abort.
    try {
        return parse(tokenizer_json, config_json, origin);
    } catch (const SortedJson::exception& e) {
        return Status::error(origin + ": unexpected JSON value: " + printable(e.what()));
    }
}

namespace {

using Impl = Tokenizer::Impl;

Status tokenizer_error(const std::string& origin, const std::string& what) {
    return Status::error(origin + ": " + what);
}

// model: a BPE model's options (only plain byte-level BPE is supported) and its vocabulary.
Status read_bpe_vocab(const SortedJson& m, Impl& im, const std::string& origin, int32_t* max_id) {
    auto fail = [&](const std::string& what) { return tokenizer_error(origin, what); };
    const std::string mtype = m.value("type", m.contains("merges") ? "BPE" : "");
    if (mtype != "BPE") return fail("unsupported tokenizer model type '" + mtype + "' (supported: BPE)");
    if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].get<double>() != 0.0)
        return fail("BPE dropout is not supported");
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
        if (m.contains(k) && m[k].is_string() && !m[k].get<std::string>().empty())
            return fail(std::string("unsupported BPE option '") + k + "'");
    if (m.value("byte_fallback", false)) return fail("unsupported BPE option 'byte_fallback'");
    im.ignore_merges = m.value("ignore_merges", false);
    if (!m.contains("vocab") || !m["vocab"].is_object()) return fail("missing 'model.vocab'");
    for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
        if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
            it.value().get<int64_t>() > (1 << 30))
            return fail("vocab entry '" + it.key() + "' has an invalid id");
        const int32_t id = it.value().get<int32_t>();
        im.token_to_id[it.key()] = id;
        *max_id = std::max(*max_id, id);
    }
    return Status::ok();
}

// added_tokens: special and other added tokens (matched in the text before BPE).
Status read_added_tokens(const SortedJson& j, Impl& im, const std::string& origin, int32_t* max_id) {
    auto fail = [&](const std::string& what) { return tokenizer_error(origin, what); };
    if (!j.contains("added_tokens") || !j["added_tokens"].is_array()) return Status::ok();
    for (const SortedJson& a : j["added_tokens"]) {
        AddedToken t;
        if (!a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
            !a["content"].is_string())
            return fail("added_tokens entries need 'id' and 'content'");
        if (a["id"].get<int64_t>() < 0 || a["id"].get<int64_t>() > (1 << 30))
            return fail("added token '" + printable(a["content"].get<std::string>()) + "' has an invalid id");
        t.id = a["id"].get<int32_t>();
        t.content = a["content"].get<std::string>();
        t.special = a.value("special", false);
        t.lstrip = a.value("lstrip", false);
        t.rstrip = a.value("rstrip", false);
        t.normalized = a.value("normalized", false);
        if (t.id < 0 || t.id > (1 << 30) || t.content.empty())
            return fail("invalid added token '" + t.content + "'");
        im.token_to_id[t.content] = t.id;
        *max_id = std::max(*max_id, t.id);
        im.added.push_back(t);
    }
    return Status::ok();
}

// model.merges: "a b" strings or ["a", "b"] pairs, in rank order; every part must be in the vocabulary.
Status read_merges(const SortedJson& m, Impl& im, const std::string& origin) {
    auto fail = [&](const std::string& what) { return tokenizer_error(origin, what); };
    if (!m.contains("merges") || !m["merges"].is_array()) return fail("missing 'model.merges'");
    int32_t rank = 0;
    for (const SortedJson& mg : m["merges"]) {
        std::string a, b;
        if (mg.is_string()) {
            const std::string s = mg.get<std::string>();
            const size_t sp = s.find(' ', 1);
            if (sp == std::string::npos) return fail("malformed merge '" + s + "'");
            a = s.substr(0, sp);
            b = s.substr(sp + 1);
        } else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
            a = mg[0].get<std::string>();
            b = mg[1].get<std::string>();
        } else {
            return fail("malformed merge entry " + mg.dump());
        }
        auto ia = im.token_to_id.find(a), ib = im.token_to_id.find(b), iab = im.token_to_id.find(a + b);
        if (ia == im.token_to_id.end() || ib == im.token_to_id.end() || iab == im.token_to_id.end())
            return fail("merge '" + a + " " + b + "' uses a token that is not in the vocabulary");
        const uint64_t key = static_cast<uint64_t>(static_cast<uint32_t>(ia->second)) << 32 |
                             static_cast<uint32_t>(ib->second);
        im.merges.emplace(key, std::make_pair(rank++, iab->second));  // the first (lowest) rank wins
    }
    return Status::ok();
}

// normalizer: NFC (alone or in a Sequence) or none.
Status read_normalizer(const SortedJson& n, Impl& im, const std::string& origin) {
    if (n.is_null()) return Status::ok();
    const std::string t = n.value("type", "");
    if (t == "NFC") {
        im.nfc = true;
        return Status::ok();
    }
    if (t == "Sequence") {
        for (const SortedJson& s : n.value("normalizers", SortedJson::array()))
            GDN_RETURN_IF_ERROR(read_normalizer(s, im, origin));
        return Status::ok();
    }
    return Status::error(origin + ": unsupported normalizer '" + t + "' (supported: NFC, Sequence)");
}

// pre_tokenizer: Split(regex) and ByteLevel steps, alone or in a Sequence.
Status read_pre_tokenizer(const SortedJson& p, Impl& im, const std::string& origin, bool* has_byte_level) {
    if (p.is_null()) return Status::ok();
    const std::string t = p.value("type", "");
    if (t == "Sequence") {
        for (const SortedJson& s : p.value("pretokenizers", SortedJson::array()))
            GDN_RETURN_IF_ERROR(read_pre_tokenizer(s, im, origin, has_byte_level));
        return Status::ok();
    }
    if (t == "Split") {
        if (p.value("invert", false)) return Status::error(origin + ": unsupported Split option invert=true");
        const std::string beh = p.value("behavior", "");
        PreStep st;
        if (beh == "Isolated")
            st.kind = PreStep::SPLIT_ISOLATED;
        else if (beh == "Removed")
            st.kind = PreStep::SPLIT_REMOVED;
        else
            return Status::error(origin + ": unsupported Split behavior '" + beh +
                                 "' (supported: Isolated, Removed)");
        const SortedJson& pat = p.value("pattern", SortedJson());
        if (pat.contains("Regex")) {
            GDN_ASSIGN_OR_RETURN(st.regex, compile_regex(pat["Regex"].get<std::string>(), false, origin));
        } else if (pat.contains("String")) {
            GDN_ASSIGN_OR_RETURN(st.regex, compile_regex(pat["String"].get<std::string>(), true, origin));
        } else {
            return Status::error(origin + ": Split pre-tokenizer without a pattern");
        }
        im.steps.push_back(std::move(st));
        return Status::ok();
    }
    if (t == "ByteLevel") {
        PreStep st;
        st.kind = PreStep::BYTE_LEVEL;
        st.add_prefix_space = p.value("add_prefix_space", false);
        if (p.value("use_regex", true)) {
            GDN_ASSIGN_OR_RETURN(st.regex, compile_regex(kGpt2Pattern, false, origin));
        }
        *has_byte_level = true;
        im.steps.push_back(std::move(st));
        return Status::ok();
    }
    return Status::error(origin + ": unsupported pre-tokenizer '" + t +
                         "' (supported: Split, ByteLevel, Sequence)");
}

}  // namespace

Result<std::shared_ptr<const Tokenizer>> Tokenizer::parse(const std::string& tokenizer_json,
                                                          const std::string& config_json,
                                                          const std::string& origin) {
    GDN_ASSIGN_OR_RETURN(SortedJson j, parse_json_sorted(tokenizer_json, origin));
    auto fail = [&](const std::string& what) { return Status::error(origin + ": " + what); };
    if (!j.is_object()) return fail("not a JSON object");
    std::shared_ptr<Tokenizer> tok(new Tokenizer());
    Impl& im = *tok->impl_;

    if (!j.contains("model") || !j["model"].is_object()) return fail("missing 'model'");
    const SortedJson& m = j["model"];
    int32_t max_id = -1;
    GDN_RETURN_IF_ERROR(read_bpe_vocab(m, im, origin, &max_id));
    GDN_RETURN_IF_ERROR(read_added_tokens(j, im, origin, &max_id));
    // Ids are dense in real files (a vocabulary, then the added tokens); the table is sized by the
    // largest id, so an id far beyond the file's own entry count (10^9) would allocate gigabytes.
    const int64_t n_entries = static_cast<int64_t>(im.token_to_id.size());  // vocabulary + added tokens
    if (max_id >= 2 * n_entries + 1024)
        return fail(strprintf("token id %d is implausible for a file of %lld tokens (ids must be < %lld)",
                              max_id, (long long)n_entries, (long long)(2 * n_entries + 1024)));
    tok->id_to_token_.assign(max_id + 1, std::string());
    tok->kind_.assign(max_id + 1, 0);
    for (const auto& [s, id] : im.token_to_id) tok->id_to_token_[id] = s;
    for (const auto& t : im.added) {
        tok->id_to_token_[t.id] = t.content;
        tok->kind_[t.id] = t.special ? 2 : 1;
    }
    for (int b = 0; b < 256; ++b) {
        auto it = im.token_to_id.find(byte_symbol(static_cast<uint8_t>(b)));
        im.byte_id[b] = it == im.token_to_id.end() ? -1 : it->second;
    }
    GDN_RETURN_IF_ERROR(read_merges(m, im, origin));
    GDN_RETURN_IF_ERROR(read_normalizer(j.value("normalizer", SortedJson()), im, origin));
    bool has_byte_level = false;
    GDN_RETURN_IF_ERROR(
        read_pre_tokenizer(j.value("pre_tokenizer", SortedJson()), im, origin, &has_byte_level));
    if (!has_byte_level)
        return fail("unsupported tokenizer: no ByteLevel pre-tokenizer (only byte-level BPE is supported)");
    const SortedJson& dec = j.value("decoder", SortedJson());
    const std::string dtype = dec.is_object() ? dec.value("type", "") : "";
    if (dtype != "ByteLevel") return fail("unsupported decoder '" + dtype + "' (supported: ByteLevel)");

    // tokenizer_config.json: extra special tokens, eos/bos, chat template.
    std::vector<std::string> extra_special;
    if (!config_json.empty()) {
        GDN_ASSIGN_OR_RETURN(SortedJson c,
                             parse_json_sorted(config_json, origin + " (tokenizer_config.json)"));
        if (c.contains("additional_special_tokens") && c["additional_special_tokens"].is_array())
            for (const SortedJson& s : c["additional_special_tokens"])
                extra_special.push_back(token_content(s));
        if (c.contains("eos_token")) tok->eos_token_ = token_content(c["eos_token"]);
        if (c.contains("bos_token")) tok->bos_token_ = token_content(c["bos_token"]);
        if (c.contains("chat_template")) {
            const SortedJson& ct = c["chat_template"];
            if (ct.is_string())
                tok->chat_template_ = ct.get<std::string>();
            else if (ct.is_array())
                for (const SortedJson& e : ct)
                    if (e.value("name", "") == "default" && e.contains("template"))
                        tok->chat_template_ = e["template"].get<std::string>();
        }
    }
    for (const std::string& s : extra_special) {
        auto it = im.token_to_id.find(s);
        if (it != im.token_to_id.end() && tok->kind_[it->second] == 1) tok->kind_[it->second] = 2;
    }
    if (!tok->eos_token_.empty()) {
        auto it = im.token_to_id.find(tok->eos_token_);
        if (it != im.token_to_id.end()) tok->eos_id_ = it->second;
    }
    // Matchers for added tokens, in the raw text (normalized=false) or after normalisation.
    for (size_t i = 0; i < im.added.size(); ++i) {
        const AddedToken& t = im.added[i];
        if (t.normalized && im.nfc)
            im.normalized_trie.add(gdn::nfc(t.content), static_cast<int32_t>(i));
        else
            im.raw_trie.add(t.content, static_cast<int32_t>(i));
    }
    return std::shared_ptr<const Tokenizer>(std::move(tok));
}

}  // namespace gdn
