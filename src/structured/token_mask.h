// Which tokens a grammar state allows next, without a pass over the vocabulary's strings: the token
// byte strings are a trie built once per tokenizer, and the mask is a walk of that trie that advances
// the grammar by each node's byte and cuts every subtree the grammar rejects.
//
// Two loops allow most of the vocabulary, and have fast paths: inside a JSON string ("plain" tokens:
// complete characters that are neither '"' nor '\' nor control bytes, possibly ending in a started
// UTF-8 character) and inside an XML tool-call string value (tokens without '\n'). There the loop's
// tokens are one precomputed bitset, the walk visits only subtrees holding other tokens, and along a
// path of bytes that keep the loop where it was (plain ASCII and complete UTF-8 characters; any byte but
// '\n') it does not step the grammar at all: those paths are walked once, when the trie is built, into
// the loop's frontier (the first node of each path where the state may change), and a mask steps the
// grammar from the frontier on. A constraint keeps the masks of its last few states (a string's loop
// comes back after every token).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "structured/grammar.h"
#include "tokenizer/tokenizer.h"

namespace gdn {

class VocabTrie {
  public:
    // Tokens [0, vocab) of `tok` (ids beyond the tokenizer's, e.g. a model's padding rows, have no
    // bytes); special and added tokens are left out: constrained output is text.
    VocabTrie(const Tokenizer& tok, int32_t vocab);
    // From the tokens' byte strings (empty: never allowed), e.g. a synthetic vocabulary for a benchmark.
    explicit VocabTrie(std::vector<std::string> token_bytes);
    int32_t vocab() const { return vocab_; }
    const std::string& bytes(int32_t id) const { return bytes_[id]; }
    size_t nodes() const { return nodes_.size(); }

    // Nodes in depth-first preorder: a node's subtree is [n, end), its first child n + 1, the next
    // sibling of a child c is c's end; so a subtree is one contiguous stretch of memory.
    struct Node {
        uint8_t byte = 0;
        int32_t end = 1;
        int32_t tokens_begin = 0, tokens_end = 0;  // token_ids_[begin, end): the tokens ending here
    };
    const std::vector<Node>& node_list() const { return nodes_; }
    const std::vector<int32_t>& token_ids() const { return token_ids_; }

    enum Loop { JSON_STRING = 0, XML_TEXT = 1, kLoops = 2 };
    struct LoopTable {
        ByteClass same;                  // bytes after which the loop's state is unchanged
        bool utf8_chars = false;         // and complete UTF-8 characters (a JSON string's loop)
        std::vector<uint64_t> tokens;    // bitset over [0, vocab): the tokens the loop reads whole
        std::vector<uint8_t> has_other;  // per node: the subtree holds a token not in `tokens`
        // The first node (with has_other) on each path from the root whose byte may change the loop's
        // state: reached by `same` bytes and complete characters, then `partial` (a started UTF-8
        // character, partial_len bytes) before the node's own byte. In trie order.
        struct Frontier {
            int32_t node;
            uint8_t partial_len;
            uint8_t partial[3];
        };
        std::vector<Frontier> frontier;
    };
    const LoopTable& loop(Loop k) const { return loops_[k]; }

  private:
    void build_frontier(LoopTable* l) const;

    int32_t vocab_;
    std::vector<std::string> bytes_;
    std::vector<Node> nodes_;  // 0 is the root (no byte)
    std::vector<int32_t> token_ids_;
    LoopTable loops_[kLoops];
};

// Bits of the tokens the state can read whole (bitset over [0, trie.vocab())); end-of-sequence tokens
// are the caller's (allowed when state.can_end()).
void allowed_tokens(const VocabTrie& trie, const GrammarState& state, std::vector<uint64_t>* bits);

// One request's constraint: the grammar, its state, and whether it has started (a constraint that
// applies after the reasoning block waits for "</think>" in the output).
class TokenConstraint {
  public:
    TokenConstraint(std::shared_ptr<const Grammar> g, std::shared_ptr<const VocabTrie> trie,
                    bool after_reasoning);
    bool active() const { return active_; }
    // Sets logits of the tokens the grammar rejects to -inf; `eos` are allowed exactly when the output
    // may end here (before the constraint starts, everything but `eos` is allowed). False when nothing at all
    // is allowed (a dead end: the caller lets eos through).
    bool mask(float* logits, const std::vector<int32_t>& eos);
    // The token was emitted (`text`: its decoded text): the grammar reads its bytes, or, before it
    // starts, the text is searched for "</think>" (what follows it in the same text is read).
    void accept(int32_t token, const std::string& text);
    const GrammarState& state() const { return state_; }
    // Reads bytes as if they had been generated (tests and benchmarks start mid-answer); false if the
    // grammar cannot read them (the state is then unchanged).
    bool advance_bytes(std::string_view bytes) { return state_.advance_bytes(bytes); }
    // Masks answered from the cache of recent states (tests, benchmarks).
    uint64_t cached_masks() const { return cache_hits_; }

  private:
    std::shared_ptr<const Grammar> g_;
    std::shared_ptr<const VocabTrie> trie_;
    GrammarState state_;
    bool active_;
    std::string watch_;  // output bytes while waiting for </think> (the last few)
    // The masks of the last few grammar states (before end-of-sequence tokens), keyed by the state.
    struct CachedMask {
        std::vector<int32_t> key;
        std::vector<uint64_t> bits;
        uint64_t used = 0;
    };
    static constexpr size_t kCachedMasks = 8;
    std::vector<CachedMask> cached_;
    uint64_t masks_ = 0, cache_hits_ = 0;
};

}  // namespace gdn
