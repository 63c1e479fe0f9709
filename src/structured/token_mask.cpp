#include "structured/token_mask.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <unordered_map>

namespace gdn {

namespace {

// Complete UTF-8 characters allowed raw inside a JSON string, possibly ending in a started one.
bool plain_string_bytes(const std::string& b) {
    size_t i = 0;
    while (i < b.size()) {
        const uint8_t c = static_cast<uint8_t>(b[i]);
        int cont;
        if (c < 0x20 || c == '"' || c == '\\') return false;
        if (c < 0x80) cont = 0;
        else if (c >= 0xc2 && c <= 0xdf) cont = 1;
        else if (c >= 0xe0 && c <= 0xef) cont = 2;
        else if (c >= 0xf0 && c <= 0xf4) cont = 3;
        else return false;  // a continuation byte first, or never valid
        ++i;
        for (int k = 0; k < cont && i < b.size(); ++k, ++i)
            if ((static_cast<uint8_t>(b[i]) & 0xc0) != 0x80) return false;
    }
    return true;
}

void set_bit(std::vector<uint64_t>& bits, int32_t t) { bits[t >> 6] |= uint64_t{1} << (t & 63); }
bool get_bit(const std::vector<uint64_t>& bits, int32_t t) { return (bits[t >> 6] >> (t & 63)) & 1; }

bool no_newline(const std::string& b) { return b.find('\n') == std::string::npos; }

// The loop the state is in (on a character boundary), or -1. A state may hold other parses beside the
// loop's: the loop's tokens are allowed whatever they do, and the walk still tries every other token.
int loop_of(const GrammarState& st) {
    const Grammar* g = st.grammar();
    if (!g) return -1;
    const int32_t body = g->string_body_rule(), chr = g->string_char_rule(), text = g->text_rule();
    for (const auto& s : st.stacks()) {
        if (body >= 0 && s.size() >= 2 && s.back().rule == chr && s.back().pos == 0 && s[s.size() - 2] == GrammarFrame{body, 0, 1})
            return VocabTrie::JSON_STRING;
        if (text >= 0 && s.back() == GrammarFrame{text, 1, 0}) return VocabTrie::XML_TEXT;
    }
    return -1;
}

struct Walk {
    const VocabTrie& trie;
    std::vector<uint64_t>& bits;
    const VocabTrie::LoopTable* loop = nullptr;  // the fast path's table, when the start state is in a loop
    std::vector<GrammarState> pool;              // one state per depth, reused

    // `st` is the state after node n's bytes; at_loop: it is the start state itself (the path so far
    // kept the loop where it was).
    void node(int32_t n, const GrammarState& st, size_t depth, bool at_loop) {
        const auto& nodes = trie.node_list();
        if (pool.size() <= depth + 1) pool.resize(depth + 2);
        for (int32_t c = nodes[n].first_child; c >= 0; c = nodes[c].next_sibling) {
            const VocabTrie::Node& child = nodes[c];
            if (loop && !loop->has_other[c]) continue;  // every token below is in loop->tokens
            if (at_loop && loop->same.has(child.byte)) {  // the same state: no step, tokens here already set
                if (child.first_child >= 0) node(c, st, depth + 1, true);
                continue;
            }
            GrammarState& next = pool[depth + 1];
            if (!st.step_into(child.byte, &next)) continue;
            for (int32_t k = child.tokens_begin; k < child.tokens_end; ++k) set_bit(bits, trie.token_ids()[k]);
            if (child.first_child >= 0 && next.can_continue()) {
                GrammarState mine = std::move(next);  // the deeper levels reuse pool[depth + 1]
                node(c, mine, depth + 1, false);
                pool[depth + 1] = std::move(mine);
            }
        }
    }
};

}  // namespace

namespace {
std::vector<std::string> text_token_bytes(const Tokenizer& tok, int32_t vocab) {
    std::vector<std::string> bytes(vocab);
    const int32_t known = std::min(vocab, tok.vocab_size());
    for (int32_t id = 0; id < known; ++id)
        if (!tok.is_special(id) && !tok.is_added(id)) bytes[id] = tok.token_bytes(id);
    return bytes;
}
}  // namespace

VocabTrie::VocabTrie(const Tokenizer& tok, int32_t vocab) : VocabTrie(text_token_bytes(tok, vocab)) {}

VocabTrie::VocabTrie(std::vector<std::string> token_bytes)
    : vocab_(static_cast<int32_t>(token_bytes.size())), bytes_(std::move(token_bytes)) {
    const int32_t vocab = vocab_;
    ByteClass plain_ascii;
    plain_ascii.add_range(0x20, 0x7f);
    plain_ascii.bits[0] &= ~(uint64_t{1} << '"');
    plain_ascii.bits[1] &= ~(uint64_t{1} << ('\\' - 64));
    ByteClass not_newline;
    not_newline.add_range(0, 0xff);
    not_newline.bits[0] &= ~(uint64_t{1} << '\n');
    loops_[JSON_STRING].same = plain_ascii;
    loops_[XML_TEXT].same = not_newline;
    bool (*const reads[kLoops])(const std::string&) = {plain_string_bytes, no_newline};
    for (auto& l : loops_) l.tokens.assign((vocab + 63) / 64, 0);
    nodes_.emplace_back();
    std::vector<int32_t> parent = {-1};
    std::unordered_map<uint64_t, int32_t> child_of;  // (node << 8 | byte) -> child
    std::vector<std::pair<int32_t, int32_t>> ends;   // (node, token)
    for (int32_t id = 0; id < vocab; ++id) {
        const std::string& b = bytes_[id];
        if (b.empty()) continue;
        bool in_loop[kLoops];
        for (int k = 0; k < kLoops; ++k)
            if ((in_loop[k] = reads[k](b))) set_bit(loops_[k].tokens, id);
        int32_t n = 0;
        for (char ch : b) {
            const uint8_t byte = static_cast<uint8_t>(ch);
            const uint64_t key = (static_cast<uint64_t>(n) << 8) | byte;
            auto it = child_of.find(key);
            if (it == child_of.end()) {
                Node nn;
                nn.byte = byte;
                nn.next_sibling = nodes_[n].first_child;
                const int32_t id_new = static_cast<int32_t>(nodes_.size());
                nodes_.push_back(nn);
                parent.push_back(n);
                nodes_[n].first_child = id_new;
                it = child_of.emplace(key, id_new).first;
            }
            n = it->second;
        }
        ends.emplace_back(n, id);
        for (int k = 0; k < kLoops; ++k) {
            if (loops_[k].has_other.size() < nodes_.size()) loops_[k].has_other.resize(nodes_.size(), 0);
            if (!in_loop[k]) loops_[k].has_other[n] = 1;
        }
    }
    for (auto& l : loops_) l.has_other.resize(nodes_.size(), 0);
    std::sort(ends.begin(), ends.end());
    token_ids_.reserve(ends.size());
    for (size_t i = 0; i < ends.size();) {
        const int32_t n = ends[i].first;
        nodes_[n].tokens_begin = static_cast<int32_t>(token_ids_.size());
        for (; i < ends.size() && ends[i].first == n; ++i) token_ids_.push_back(ends[i].second);
        nodes_[n].tokens_end = static_cast<int32_t>(token_ids_.size());
    }
    for (auto& l : loops_)
        for (size_t n = nodes_.size(); n-- > 1;)  // children come after their parents
            if (l.has_other[n]) l.has_other[parent[n]] = 1;
}

// Every byte of `same` leaves the state as it was (then the walk need not step along such bytes). A
// step depends only on which parses' classes hold the byte, so one byte per such signature is tried.
bool keeps_state(const GrammarState& st, const ByteClass& same) {
    const auto& stacks = st.stacks();
    if (stacks.size() > 64) return false;
    auto sorted = [](std::vector<std::vector<GrammarFrame>> v) {
        std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
            return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), [](const GrammarFrame& x, const GrammarFrame& y) {
                return std::tie(x.rule, x.alt, x.pos) < std::tie(y.rule, y.alt, y.pos);
            });
        });
        return v;
    };
    const auto want = sorted(stacks);
    std::vector<uint64_t> tried;
    GrammarState next;
    for (int b = 0; b < 256; ++b) {
        if (!same.has(static_cast<uint8_t>(b))) continue;
        uint64_t sig = 0;
        for (size_t i = 0; i < stacks.size(); ++i) {
            const GrammarFrame& top = stacks[i].back();
            if (st.grammar()->alts(top.rule)[top.alt][top.pos].cls.has(static_cast<uint8_t>(b))) sig |= uint64_t{1} << i;
        }
        if (std::find(tried.begin(), tried.end(), sig) != tried.end()) continue;
        tried.push_back(sig);
        if (!st.step_into(static_cast<uint8_t>(b), &next) || next.can_end() != st.can_end() || sorted(next.stacks()) != want)
            return false;
    }
    return true;
}

void allowed_tokens(const VocabTrie& trie, const GrammarState& state, std::vector<uint64_t>* bits) {
    Walk w{trie, *bits, nullptr, {}};
    const int loop = loop_of(state);
    bool at_loop = false;
    if (loop >= 0) {
        w.loop = &trie.loop(static_cast<VocabTrie::Loop>(loop));
        *bits = w.loop->tokens;
        at_loop = keeps_state(state, w.loop->same);
    } else {
        bits->assign((trie.vocab() + 63) / 64, 0);
    }
    w.node(0, state, 0, at_loop);
}

TokenConstraint::TokenConstraint(std::shared_ptr<const Grammar> g, std::shared_ptr<const VocabTrie> trie, bool after_reasoning)
    : g_(std::move(g)), trie_(std::move(trie)), state_(g_.get()), active_(!after_reasoning) {}

bool TokenConstraint::mask(float* logits, const std::vector<int32_t>& eos) {
    if (!active_) {  // reasoning is free, but it may not end the output: the constrained answer must follow
        for (int32_t t : eos)
            if (t >= 0 && t < trie_->vocab()) logits[t] = -INFINITY;
        return true;
    }
    const int32_t V = trie_->vocab();
    allowed_tokens(*trie_, state_, &bits_);
    if (state_.can_end())
        for (int32_t t : eos)
            if (t >= 0 && t < V) set_bit(bits_, t);
    // Word by word: inside a string almost every word is all ones (one test), at a structural position
    // almost every word is all zeros (64 stores the compiler vectorises); only mixed words go bit by bit.
    bool any = false;
    const size_t words = bits_.size();
    for (size_t w = 0; w < words; ++w) {
        const uint64_t allowed = bits_[w];
        any |= allowed != 0;
        const size_t base = w * 64, n = std::min<size_t>(64, static_cast<size_t>(V) - base);
        if (allowed == 0) {
            std::fill_n(logits + base, n, -INFINITY);
            continue;
        }
        uint64_t rejected = ~allowed;
        if (n < 64) rejected &= (uint64_t{1} << n) - 1;
        while (rejected) {
            logits[base + static_cast<size_t>(__builtin_ctzll(rejected))] = -INFINITY;
            rejected &= rejected - 1;
        }
    }
    return any;
}

void TokenConstraint::accept(int32_t token, const std::string& text) {
    if (active_) {
        // Masked, so it reads (an end-of-sequence token has no bytes).
        if (token >= 0 && token < trie_->vocab()) state_.advance_bytes(trie_->bytes(token));
        return;
    }
    watch_ += text;  // </think> is an added token in Qwen's vocabularies: its text, not trie bytes
    const size_t at = watch_.find("</think>");
    if (at == std::string::npos) {
        if (watch_.size() > 64) watch_.erase(0, watch_.size() - 64);
        return;
    }
    active_ = true;
    state_.advance_bytes(watch_.substr(at + 8));  // what followed it in the same text, when it reads
    watch_.clear();
}

}  // namespace gdn
