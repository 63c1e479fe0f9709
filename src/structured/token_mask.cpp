#include "structured/token_mask.h"

#include <algorithm>
#include <cmath>
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

// At a JSON string's character loop, on a character boundary.
bool in_string_body(const Grammar& g, const GrammarState& st) {
    const int32_t body = g.string_body_rule(), chr = g.string_char_rule();
    if (body < 0) return false;
    for (const auto& s : st.stacks())
        if (s.size() >= 2 && s.back().rule == chr && s.back().pos == 0 && s[s.size() - 2] == GrammarFrame{body, 0, 1})
            return true;
    return false;
}

struct Walk {
    const VocabTrie& trie;
    std::vector<uint64_t>& bits;
    bool only_nonplain;
    std::vector<GrammarState> pool;  // one state per depth, reused

    void node(int32_t n, const GrammarState& st, size_t depth) {
        const auto& nodes = trie.node_list();
        if (pool.size() <= depth + 1) pool.resize(depth + 2);
        for (int32_t c = nodes[n].first_child; c >= 0; c = nodes[c].next_sibling) {
            const VocabTrie::Node& child = nodes[c];
            if (only_nonplain && !child.has_nonplain) continue;
            GrammarState& next = pool[depth + 1];
            if (!st.step_into(child.byte, &next)) continue;
            for (int32_t k = child.tokens_begin; k < child.tokens_end; ++k) set_bit(bits, trie.token_ids()[k]);
            if (child.first_child >= 0 && next.can_continue()) {
                GrammarState mine = std::move(next);  // the deeper levels reuse pool[depth + 1]
                node(c, mine, depth + 1);
                pool[depth + 1] = std::move(mine);
            }
        }
    }
};

}  // namespace

VocabTrie::VocabTrie(const Tokenizer& tok, int32_t vocab) : vocab_(vocab) {
    bytes_.resize(vocab);
    const int32_t known = std::min(vocab, tok.vocab_size());
    for (int32_t id = 0; id < known; ++id) {
        if (tok.is_special(id) || tok.is_added(id)) continue;
        auto b = tok.token_bytes(id);
        bytes_[id] = std::move(b);
    }
    plain_.assign((vocab + 63) / 64, 0);
    nodes_.emplace_back();
    std::vector<int32_t> parent = {-1};
    std::unordered_map<uint64_t, int32_t> child_of;  // (node << 8 | byte) -> child
    std::vector<std::pair<int32_t, int32_t>> ends;   // (node, token)
    for (int32_t id = 0; id < vocab; ++id) {
        const std::string& b = bytes_[id];
        if (b.empty()) continue;
        const bool plain = plain_string_bytes(b);
        if (plain) set_bit(plain_, id);
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
        if (!plain) nodes_[n].has_nonplain = true;
    }
    std::sort(ends.begin(), ends.end());
    token_ids_.reserve(ends.size());
    for (size_t i = 0; i < ends.size();) {
        const int32_t n = ends[i].first;
        nodes_[n].tokens_begin = static_cast<int32_t>(token_ids_.size());
        for (; i < ends.size() && ends[i].first == n; ++i) token_ids_.push_back(ends[i].second);
        nodes_[n].tokens_end = static_cast<int32_t>(token_ids_.size());
    }
    for (size_t n = nodes_.size(); n-- > 1;)  // children come after their parents
        if (nodes_[n].has_nonplain) nodes_[parent[n]].has_nonplain = true;
}

void allowed_tokens(const VocabTrie& trie, const GrammarState& state, std::vector<uint64_t>* bits) {
    bits->assign((trie.vocab() + 63) / 64, 0);
    Walk w{trie, *bits, false, {}};
    if (state.grammar() && in_string_body(*state.grammar(), state)) {
        *bits = trie.plain();
        w.only_nonplain = true;
    }
    w.node(0, state, 0);
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
    bool any = false;
    for (int32_t t = 0; t < V; ++t) {
        if (get_bit(bits_, t)) any = true;
        else logits[t] = -INFINITY;
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
