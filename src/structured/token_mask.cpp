#include "structured/token_mask.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <tuple>
#include <unordered_map>

namespace gdn {

namespace {

// The continuation bytes a UTF-8 lead byte announces (0: not a lead byte).
int utf8_continuations(uint8_t b) {
    if (b >= 0xc2 && b <= 0xdf) return 1;
    if (b >= 0xe0 && b <= 0xef) return 2;
    if (b >= 0xf0 && b <= 0xf4) return 3;
    return 0;
}

// Complete UTF-8 characters allowed raw inside a JSON string, possibly ending in a started one.
bool plain_string_bytes(const std::string& b) {
    size_t i = 0;
    while (i < b.size()) {
        const uint8_t c = static_cast<uint8_t>(b[i]);
        int cont;
        if (c < 0x20 || c == '"' || c == '\\') return false;
        if (c < 0x80)
            cont = 0;
        else if ((cont = utf8_continuations(c)) == 0)
            return false;  // a continuation byte first, or never valid
        ++i;
        for (int k = 0; k < cont && i < b.size(); ++k, ++i)
            if ((static_cast<uint8_t>(b[i]) & 0xc0) != 0x80) return false;
    }
    return true;
}

void set_bit(std::vector<uint64_t>& bits, int32_t t) {
    bits[t >> 6] |= uint64_t{1} << (t & 63);
}

bool no_newline(const std::string& b) {
    return b.find('\n') == std::string::npos;
}

// The loop the state is in (on a character boundary), or -1. A state may hold other parses beside the
// loop's: the loop's tokens are allowed whatever they do, and the walk still tries every other token.
int loop_of(const GrammarState& st) {
    const Grammar* g = st.grammar();
    if (!g) return -1;
    const int32_t body = g->string_body_rule(), chr = g->string_char_rule(), text = g->text_rule();
    for (const auto& s : st.stacks()) {
        if (body >= 0 && s.size() >= 2 && s.back().rule == chr && s.back().pos == 0 &&
            s[s.size() - 2] == GrammarFrame{body, 0, 1})
            return VocabTrie::JSON_STRING;
        if (text >= 0 && s.back() == GrammarFrame{text, 1, 0}) return VocabTrie::XML_TEXT;
    }
    return -1;
}

bool same_state(const GrammarState& a, const GrammarState& b) {
    return a.can_end() == b.can_end() && a.stacks() == b.stacks();
}

struct Walk {
    const VocabTrie& trie;
    std::vector<uint64_t>& bits;
    const VocabTrie::LoopTable* loop = nullptr;  // the fast path's table, when the start state is in a loop
    const GrammarState* start = nullptr;         // the loop's state, when its `same` bytes keep it
    std::vector<GrammarState> pool;              // one state per depth, reused

    void set_tokens(const VocabTrie::Node& n) {
        for (int32_t k = n.tokens_begin; k < n.tokens_end; ++k) set_bit(bits, trie.token_ids()[k]);
    }

    void ensure_pool(size_t depth) {
        if (pool.size() <= depth + 1) pool.resize(depth + 2);
    }

    // `st` is the state after node n's bytes: every child the grammar takes, and below it.
    void node(int32_t n, const GrammarState& st, size_t depth) {
        const auto& nodes = trie.node_list();
        for (int32_t c = n + 1; c < nodes[n].end; c = nodes[c].end) {
            if (loop && !loop->has_other[c]) continue;  // every token below is in loop->tokens
            step_child(c, st, depth);
        }
    }

    // Child c of a node whose state is `st`.
    void step_child(int32_t c, const GrammarState& st, size_t depth) {
        const VocabTrie::Node& child = trie.node_list()[c];
        ensure_pool(depth);
        GrammarState& next = pool[depth + 1];
        if (!st.step_into(child.byte, &next)) return;
        set_tokens(child);
        if (child.end == c + 1 || !next.can_continue()) return;
        if (start && same_state(next, *start)) {  // back in the loop (e.g. after "\n" and a letter)
            at_loop(c, depth + 1);
            return;
        }
        GrammarState mine = std::move(next);  // the deeper levels reuse pool[depth + 1]
        node(c, mine, depth + 1);
        pool[depth + 1] = std::move(mine);
    }

    // The state after node n's bytes is the loop's start state, which its `same` bytes keep: one pass
    // over the subtree's stretch of nodes, descending along `same` bytes without a step (preorder: every
    // node reached is below `same` bytes only) and stepping where another byte leaves the loop.
    void at_loop(int32_t n, size_t depth) {
        const auto& nodes = trie.node_list();
        for (int32_t i = n + 1; i < nodes[n].end;) {
            const VocabTrie::Node& nd = nodes[i];
            if (!loop->has_other[i]) {
                i = nd.end;
            } else if (loop->same.has(nd.byte)) {
                set_tokens(nd);
                ++i;
            } else {
                step_child(i, *start, depth);
                i = nd.end;
            }
        }
    }

    // The start state is in the loop and every path of `same` bytes and complete characters keeps it:
    // the paths were walked when the trie was built, the grammar steps from each frontier node on.
    void frontier() {
        const auto& nodes = trie.node_list();
        std::array<int8_t, 256> stepped{};  // from the start state by one byte: 0 not yet, 1 alive, -1 dead
        std::vector<GrammarState> by_byte(256);
        GrammarState partial, next;
        std::string partial_bytes;
        bool partial_alive = false;
        for (const VocabTrie::LoopTable::Frontier& f : loop->frontier) {
            const VocabTrie::Node& nd = nodes[f.node];
            const GrammarState* st;
            if (f.partial_len == 0) {
                int8_t& known = stepped[nd.byte];
                if (known == 0) known = start->step_into(nd.byte, &by_byte[nd.byte]) ? 1 : -1;
                if (known < 0) continue;
                st = &by_byte[nd.byte];
            } else {
                const std::string_view bytes(reinterpret_cast<const char*>(f.partial), f.partial_len);
                if (bytes != partial_bytes) {  // neighbours in trie order share it
                    partial_bytes.assign(bytes);
                    partial = *start;
                    partial_alive = partial.advance_bytes(bytes);
                }
                if (!partial_alive || !partial.step_into(nd.byte, &next)) continue;
                st = &next;
            }
            set_tokens(nd);
            if (nd.end > f.node + 1 && st->can_continue()) {
                if (same_state(*st, *start))
                    at_loop(f.node, 0);
                else
                    node(f.node, *st, 0);
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
    loops_[JSON_STRING].utf8_chars = true;
    loops_[XML_TEXT].same = not_newline;
    bool (*const reads[kLoops])(const std::string&) = {plain_string_bytes, no_newline};
    for (auto& l : loops_) l.tokens.assign((vocab + 63) / 64, 0);

    // The trie in insertion order first (children as linked lists), then renumbered in preorder.
    struct Built {
        uint8_t byte;
        int32_t first_child, next_sibling, parent;
        uint8_t other[kLoops];
    };
    std::vector<Built> built = {{0, -1, -1, -1, {}}};
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
                const int32_t id_new = static_cast<int32_t>(built.size());
                built.push_back({byte, -1, built[n].first_child, n, {}});
                built[n].first_child = id_new;
                it = child_of.emplace(key, id_new).first;
            }
            n = it->second;
        }
        ends.emplace_back(n, id);
        for (int k = 0; k < kLoops; ++k)
            if (!in_loop[k]) built[n].other[k] = 1;
    }
    for (size_t n = built.size(); n-- > 1;)  // children come after their parents
        for (int k = 0; k < kLoops; ++k) built[built[n].parent].other[k] |= built[n].other[k];

    std::vector<int32_t> order, preorder_id(built.size());
    order.reserve(built.size());
    for (std::vector<int32_t> todo = {0}; !todo.empty();) {
        const int32_t n = todo.back();
        todo.pop_back();
        preorder_id[n] = static_cast<int32_t>(order.size());
        order.push_back(n);
        for (int32_t c = built[n].first_child; c >= 0; c = built[c].next_sibling) todo.push_back(c);
    }
    nodes_.resize(built.size());
    for (auto& l : loops_) l.has_other.resize(built.size());
    for (size_t i = 0; i < order.size(); ++i) {
        nodes_[i].byte = built[order[i]].byte;
        nodes_[i].end = static_cast<int32_t>(i) + 1;
        for (int k = 0; k < kLoops; ++k) loops_[k].has_other[i] = built[order[i]].other[k];
    }
    for (size_t i = order.size(); i-- > 1;) {  // a subtree ends where its last descendant's does
        const int32_t parent = preorder_id[built[order[i]].parent];
        nodes_[parent].end = std::max(nodes_[parent].end, nodes_[i].end);
    }
    for (auto& e : ends) e.first = preorder_id[e.first];
    std::sort(ends.begin(), ends.end());
    token_ids_.reserve(ends.size());
    for (size_t i = 0; i < ends.size();) {
        const int32_t n = ends[i].first;
        nodes_[n].tokens_begin = static_cast<int32_t>(token_ids_.size());
        for (; i < ends.size() && ends[i].first == n; ++i) token_ids_.push_back(ends[i].second);
        nodes_[n].tokens_end = static_cast<int32_t>(token_ids_.size());
    }
    for (auto& l : loops_) build_frontier(&l);
}

// Depth first from the root along the subtrees holding other tokens, carrying how many continuation
// bytes a started character still needs; a byte that neither keeps the loop nor continues a character
// makes its node a frontier node.
void VocabTrie::build_frontier(LoopTable* l) const {
    struct Path {
        int32_t node;
        uint8_t pending, len, partial[3];
    };
    std::vector<Path> todo = {{0, 0, 0, {}}};
    std::vector<Path> children;
    while (!todo.empty()) {
        const Path p = todo.back();
        todo.pop_back();
        children.clear();
        for (int32_t c = p.node + 1; c < nodes_[p.node].end; c = nodes_[c].end) {
            if (!l->has_other[c]) continue;
            const uint8_t b = nodes_[c].byte;
            Path next = p;
            next.node = c;
            bool keeps = false;
            if (p.pending == 0) {
                if (l->same.has(b)) {
                    keeps = true;
                } else if (l->utf8_chars && utf8_continuations(b) > 0) {
                    keeps = true;
                    next.pending = static_cast<uint8_t>(utf8_continuations(b));
                    next.len = 1;
                    next.partial[0] = b;
                }
            } else if ((b & 0xc0) == 0x80) {
                keeps = true;
                if (--next.pending == 0)
                    next.len = 0;
                else
                    next.partial[next.len++] = b;
            }
            if (!keeps) {
                LoopTable::Frontier f{c, p.len, {}};
                std::copy(p.partial, p.partial + p.len, f.partial);
                l->frontier.push_back(f);
            } else if (nodes_[c].end > c + 1) {
                children.push_back(next);
            }
        }
        todo.insert(todo.end(), children.rbegin(), children.rend());
    }
}

namespace {

std::vector<std::vector<GrammarFrame>> sorted_stacks(std::vector<std::vector<GrammarFrame>> v) {
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
        return std::lexicographical_compare(
            a.begin(), a.end(), b.begin(), b.end(), [](const GrammarFrame& x, const GrammarFrame& y) {
                return std::tie(x.rule, x.alt, x.pos) < std::tie(y.rule, y.alt, y.pos);
            });
    });
    return v;
}

// Every byte string c1 c2 .. cn (c_i in cls[i]) read from `st` gives back `want` (the sorted stacks of
// the state the strings start from; can_end too). A step depends only on which parses' classes hold
// the byte, so one byte per such signature is tried; `budget` bounds the steps.
bool keeps_along(const GrammarState& st, const ByteClass* cls, size_t n,
                 const std::vector<std::vector<GrammarFrame>>& want, bool want_end, int* budget) {
    if (n == 0) return st.can_end() == want_end && sorted_stacks(st.stacks()) == want;
    const auto& stacks = st.stacks();
    if (stacks.size() > 64) return false;
    std::vector<uint64_t> tried;
    GrammarState next;
    for (int b = 0; b < 256; ++b) {
        if (!cls[0].has(static_cast<uint8_t>(b))) continue;
        uint64_t sig = 0;
        for (size_t i = 0; i < stacks.size(); ++i) {
            const GrammarFrame& top = stacks[i].back();
            if (st.grammar()->alts(top.rule)[top.alt][top.pos].cls.has(static_cast<uint8_t>(b)))
                sig |= uint64_t{1} << i;
        }
        if (std::find(tried.begin(), tried.end(), sig) != tried.end()) continue;
        tried.push_back(sig);
        if (--*budget < 0 || !st.step_into(static_cast<uint8_t>(b), &next) ||
            !keeps_along(next, cls + 1, n - 1, want, want_end, budget))
            return false;
    }
    return true;
}

// The loop's `same` bytes (and, for a JSON string, complete UTF-8 characters) leave the state as it was.
bool keeps_state(const GrammarState& st, const VocabTrie::LoopTable& loop, bool* chars_too) {
    const auto want = sorted_stacks(st.stacks());
    int budget = 1024;
    *chars_too = false;
    if (!keeps_along(st, &loop.same, 1, want, st.can_end(), &budget)) return false;
    if (!loop.utf8_chars) return true;
    ByteClass cont, lead2, lead3, lead4;
    cont.add_range(0x80, 0xbf);
    lead2.add_range(0xc2, 0xdf);
    lead3.add_range(0xe0, 0xef);
    lead4.add_range(0xf0, 0xf4);
    const ByteClass c2[] = {lead2, cont}, c3[] = {lead3, cont, cont}, c4[] = {lead4, cont, cont, cont};
    *chars_too = keeps_along(st, c2, 2, want, st.can_end(), &budget) &&
                 keeps_along(st, c3, 3, want, st.can_end(), &budget) &&
                 keeps_along(st, c4, 4, want, st.can_end(), &budget);
    return true;
}

}  // namespace

void allowed_tokens(const VocabTrie& trie, const GrammarState& state, std::vector<uint64_t>* bits) {
    Walk w{trie, *bits, nullptr, nullptr, {}};
    const int loop = loop_of(state);
    if (loop < 0) {
        bits->assign((trie.vocab() + 63) / 64, 0);
        w.node(0, state, 0);
        return;
    }
    w.loop = &trie.loop(static_cast<VocabTrie::Loop>(loop));
    *bits = w.loop->tokens;
    bool chars_too = false;
    if (!keeps_state(state, *w.loop, &chars_too)) {
        w.node(0, state, 0);
        return;
    }
    w.start = &state;
    if (chars_too || !w.loop->utf8_chars)
        w.frontier();
    else
        w.at_loop(0, 0);  // the frontier assumed complete characters keep the loop: they do not here
}

TokenConstraint::TokenConstraint(std::shared_ptr<const Grammar> g, std::shared_ptr<const VocabTrie> trie,
                                 bool after_reasoning)
    : g_(std::move(g)), trie_(std::move(trie)), state_(g_.get()), active_(!after_reasoning) {}

namespace {
// The state as a key: its parses in a canonical order (step order does not change what they allow).
std::vector<int32_t> state_key(const GrammarState& st) {
    std::vector<int32_t> key = {st.can_end() ? 1 : 0};
    for (const auto& stack : sorted_stacks(st.stacks())) {
        key.push_back(static_cast<int32_t>(stack.size()));
        for (const GrammarFrame& f : stack) key.insert(key.end(), {f.rule, f.alt, f.pos});
    }
    return key;
}
}  // namespace

bool TokenConstraint::mask(float* logits, const std::vector<int32_t>& eos) {
    const int32_t V = trie_->vocab();
    if (!active_) {  // reasoning is free, but it may not end the output: the constrained answer must follow
        for (int32_t t : eos)
            if (t >= 0 && t < V) logits[t] = -INFINITY;
        return true;
    }
    ++masks_;
    std::vector<int32_t> key = state_key(state_);
    CachedMask* entry = nullptr;
    for (CachedMask& c : cached_)
        if (c.key == key) entry = &c;
    if (entry) {
        ++cache_hits_;
    } else {
        if (cached_.size() < kCachedMasks) {
            entry = &cached_.emplace_back();
        } else {
            entry =
                &*std::min_element(cached_.begin(), cached_.end(),
                                   [](const CachedMask& a, const CachedMask& b) { return a.used < b.used; });
        }
        entry->key = std::move(key);
        allowed_tokens(*trie_, state_, &entry->bits);
    }
    entry->used = masks_;
    // End-of-sequence tokens are allowed exactly when the output may end here: kept aside, put back.
    std::vector<std::pair<int32_t, float>> ends;
    if (state_.can_end())
        for (int32_t t : eos)
            if (t >= 0 && t < V) ends.emplace_back(t, logits[t]);
    // Word by word: inside a string almost every word is all ones (one test), at a structural position
    // almost every word is all zeros (64 stores the compiler vectorises); only mixed words go bit by bit.
    const std::vector<uint64_t>& bits = entry->bits;
    bool any = !ends.empty();
    const size_t words = bits.size();
    for (size_t w = 0; w < words; ++w) {
        const uint64_t allowed = bits[w];
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
    for (const auto& [t, v] : ends) logits[t] = v;
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
