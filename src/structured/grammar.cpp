#include "structured/grammar.h"

#include <algorithm>

#include "core/log.h"

namespace gdn {

namespace {
// Expansion depth that no grammar of ours reaches (nesting, not length: repetition is a tail call).
constexpr int kMaxExpansionDepth = 512;
// Live parses kept at once: the compilers' grammars are nearly deterministic; this bounds a hostile
// schema's ambiguity (anyOf of look-alike branches).
constexpr size_t kMaxStacks = 256;
}  // namespace

Grammar::Grammar() {
    new_rule("root");
}

int32_t Grammar::new_rule(std::string name) {
    bytes_ += sizeof(std::vector<Seq>) + sizeof(std::string) + name.size();
    alts_.emplace_back();
    names_.push_back(std::move(name));
    return static_cast<int32_t>(alts_.size() - 1);
}

void Grammar::add_alt(int32_t rule, Seq seq) {
    bytes_ += sizeof(Seq) + seq.size() * sizeof(GrammarItem);
    alts_[rule].push_back(std::move(seq));
}

bool Grammar::prune_unproductive() {
    // Productive rules by a fixed point: a rule is productive once one of its alternatives holds only
    // byte classes and productive rules. Linear passes until nothing changes (rules x passes).
    std::vector<char> productive(alts_.size(), 0);
    auto alt_productive = [&](const Seq& s) {
        return std::all_of(s.begin(), s.end(),
                           [&](const GrammarItem& it) { return it.rule < 0 || productive[it.rule]; });
    };
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < alts_.size(); ++r)
            if (!productive[r] && std::any_of(alts_[r].begin(), alts_[r].end(), alt_productive)) {
                productive[r] = 1;
                changed = true;
            }
    }
    for (auto& alts : alts_)
        alts.erase(std::remove_if(alts.begin(), alts.end(), [&](const Seq& s) { return !alt_productive(s); }),
                   alts.end());
    return productive[root()];
}

int32_t Grammar::repeat(int32_t x, int64_t min, int64_t max, const char* name) {
    int32_t tail = new_rule(name);
    if (max < 0) {
        add_alt(tail, {ref(x), ref(tail)});
        add_alt(tail, {});
    } else {
        add_alt(tail, {});                                           // x{0,0}
        for (int64_t k = 0; k < max - min && !over_budget(); ++k) {  // over budget: the caller refuses it
            const int32_t t = new_rule(name);
            add_alt(t, {ref(x), ref(tail)});
            add_alt(t, {});
            tail = t;
        }
    }
    Seq s;
    // A required count past the budget: marked over it (the caller refuses the grammar), nothing allocated.
    if (budget_ != SIZE_MAX &&
        static_cast<uint64_t>(min) * sizeof(GrammarItem) > budget_ - std::min(bytes_, budget_)) {
        bytes_ = budget_ + 1;
        min = 0;
    }
    for (int64_t k = 0; k < min; ++k) s.push_back(ref(x));
    s.push_back(ref(tail));
    const int32_t r = new_rule(name);
    add_alt(r, std::move(s));
    return r;
}

void Grammar::append_literal(Seq* s, std::string_view bytes) {
    for (char c : bytes) s->push_back(cls(ByteClass::of(static_cast<uint8_t>(c))));
}

GrammarState::GrammarState(const Grammar* g) : g_(g) {
    close({{g->root(), -1, 0}}, 0);
}

// `stack`'s top frame is either a rule to enter (alt -1) or a position in an alternative. Pops finished
// frames, enters rules (each alternative a new parse), and keeps the stacks that wait on a class.
void GrammarState::close(std::vector<GrammarFrame> stack, int depth) {
    if (depth > kMaxExpansionDepth || stacks_.size() >= kMaxStacks) return;
    while (true) {
        if (stack.empty()) {
            can_end_ = true;
            return;
        }
        GrammarFrame& top = stack.back();
        if (top.alt < 0) {  // enter the rule: one parse per alternative
            const auto& alts = g_->alts(top.rule);
            const int32_t rule = top.rule;
            stack.pop_back();
            for (size_t a = 0; a < alts.size(); ++a) {
                std::vector<GrammarFrame> s = stack;
                s.push_back({rule, static_cast<int32_t>(a), 0});
                close(std::move(s), depth + 1);
            }
            return;
        }
        const Grammar::Seq& seq = g_->alts(top.rule)[top.alt];
        if (top.pos >= static_cast<int32_t>(seq.size())) {  // finished: back to the caller
            stack.pop_back();
            continue;
        }
        const GrammarItem& item = seq[top.pos];
        if (item.rule < 0) {  // waits on a class
            if (std::find(stacks_.begin(), stacks_.end(), stack) == stacks_.end())
                stacks_.push_back(std::move(stack));
            return;
        }
        // A rule: the caller resumes after it, unless it is the last item (tail call: no frame kept).
        if (top.pos + 1 == static_cast<int32_t>(seq.size()))
            stack.pop_back();
        else
            top.pos++;
        stack.push_back({item.rule, -1, 0});
        depth++;
        if (depth > kMaxExpansionDepth) return;
    }
}

bool GrammarState::step_into(uint8_t b, GrammarState* out) const {
    out->g_ = g_;
    out->stacks_.clear();
    out->can_end_ = false;
    for (const auto& s : stacks_) {
        const GrammarFrame& top = s.back();
        if (!g_->alts(top.rule)[top.alt][top.pos].cls.has(b)) continue;
        std::vector<GrammarFrame> next = s;
        next.back().pos++;
        out->close(std::move(next), 0);
    }
    return !out->stacks_.empty() || out->can_end_;
}

bool GrammarState::advance(uint8_t b) {
    GrammarState next(*this);
    if (!step_into(b, &next)) return false;
    *this = std::move(next);
    return true;
}

bool GrammarState::advance_bytes(std::string_view bytes) {
    GrammarState s(*this);
    for (char c : bytes)
        if (!s.advance(static_cast<uint8_t>(c))) return false;
    *this = std::move(s);
    return true;
}

}  // namespace gdn
