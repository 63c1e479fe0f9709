// A context-free grammar over bytes and its incremental recogniser: what structured outputs (JSON
// schemas, tool calls, choices) compile to, and what the token mask walks.
//
// A rule is a list of alternatives; an alternative is a sequence of items; an item is a byte class
// (256 bits) or a rule. No left recursion (the compilers never write it). The recogniser keeps every
// live parse as a stack of frames (rule, alternative, position): advancing by a byte moves the frames
// whose next item is a class containing it, then expands rules until each live stack's top frame waits
// on a class again. A rule in the last position of a sequence replaces its frame instead of pushing
// (a tail call), so right-recursive repetition (`R := x R | ε`) runs in constant stack depth.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gdn {

// The most memory one compiled structure's grammar may take (Grammar::bytes): past it the compilers
// (JSON schema, tool calls, regex) stop and return an error that names the limit.
inline constexpr size_t kMaxGrammarBytes = size_t{64} << 20;

struct ByteClass {
    std::array<uint64_t, 4> bits{};
    void add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
    void add_range(uint8_t lo, uint8_t hi) {
        for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
    }
    bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
    static ByteClass of(uint8_t b) {
        ByteClass c;
        c.add(b);
        return c;
    }
};

struct GrammarItem {
    int32_t rule = -1;  // >= 0: a rule; -1: the class
    ByteClass cls;
};

class Grammar {
  public:
    using Seq = std::vector<GrammarItem>;

    // Rules are made first (ids), then given their alternatives; rule 0 is made by the constructor and
    // is the root.
    Grammar();
    int32_t new_rule(std::string name);
    void add_alt(int32_t rule, Seq seq);
    // The memory the rules take (approximately: containers and items), and a budget for it: the
    // compilers stop and refuse a structure that grows past it (a small schema can ask for gigabytes:
    // every bounded repetition is a chain of rules). repeat() stops early once over.
    size_t bytes() const { return bytes_; }
    void set_budget(size_t bytes) { budget_ = bytes; }
    size_t budget() const { return budget_; }
    bool over_budget() const { return bytes_ > budget_; }
    // The rules of a JSON string's character loop (body := char body | '"'): token_mask.cpp's fast path.
    void set_string_rules(int32_t body, int32_t chr) { string_body_rule_ = body, string_char_rule_ = chr; }

    // Sequence builders.
    static GrammarItem cls(ByteClass c) { return {-1, c}; }
    static GrammarItem ref(int32_t rule) { return {rule, {}}; }
    static void append_literal(Seq* s, std::string_view bytes);
    // A rule matching rule x repeated min..max times (max < 0: unbounded), right-recursive.
    int32_t repeat(int32_t x, int64_t min, int64_t max, const char* name = "repeat");
    static Seq literal(std::string_view bytes) {
        Seq s;
        append_literal(&s, bytes);
        return s;
    }

    // Drops every alternative that can derive no finite byte string (it refers, directly or not, only to
    // itself: a schema's `$ref` cycle with no way out), so a parse never enters a dead end. False when
    // the root itself derives nothing finite: the grammar admits no document.
    bool prune_unproductive();

    int32_t root() const { return 0; }
    size_t rules() const { return alts_.size(); }
    const std::vector<Seq>& alts(int32_t rule) const { return alts_[rule]; }
    const std::string& name(int32_t rule) const { return names_[rule]; }
    // The rule whose loop reads a JSON string's characters (token_mask.cpp's fast path), or -1.
    int32_t string_body_rule() const { return string_body_rule_; }
    int32_t string_char_rule() const { return string_char_rule_; }
    // The rule of free text up to a line that starts with '<' (XML tool-call string values:
    // text := ε | [^\n] text | '\n' line), its alternative 1 reading [^\n]: the other fast path.
    void set_text_rule(int32_t text) { text_rule_ = text; }
    int32_t text_rule() const { return text_rule_; }

  private:
    std::vector<std::vector<Seq>> alts_;
    std::vector<std::string> names_;
    size_t bytes_ = 0, budget_ = SIZE_MAX;
    int32_t string_body_rule_ = -1, string_char_rule_ = -1, text_rule_ = -1;
};

struct GrammarFrame {
    int32_t rule, alt, pos;
    bool operator==(const GrammarFrame& o) const { return rule == o.rule && alt == o.alt && pos == o.pos; }
};

// The set of live parses after some bytes. Cheap to copy (a few small stacks).
class GrammarState {
  public:
    GrammarState() = default;                 // empty: a target for step_into
    explicit GrammarState(const Grammar* g);  // before any byte
    // False (and the state unchanged) when no parse can take the byte.
    bool advance(uint8_t b);
    bool advance_bytes(std::string_view bytes);
    // A parse is complete: the output may end here.
    bool can_end() const { return can_end_; }
    // A byte may still follow (some parse is not complete).
    bool can_continue() const { return !stacks_.empty(); }
    const std::vector<std::vector<GrammarFrame>>& stacks() const { return stacks_; }
    const Grammar* grammar() const { return g_; }
    // Stepping into `out` without touching this state (the mask walk's hot path): false when dead.
    bool step_into(uint8_t b, GrammarState* out) const;

  private:
    void close(std::vector<GrammarFrame> stack, int depth);  // expands until classes are on top
    const Grammar* g_ = nullptr;
    std::vector<std::vector<GrammarFrame>> stacks_;  // each top frame waits on a class
    bool can_end_ = false;
};

}  // namespace gdn
