#include "structured/regex_grammar.h"

#include "core/log.h"

namespace gdn {

namespace {

constexpr int64_t kMaxRepeat = 1000;
constexpr int kMaxNesting = 64;

// A set of characters: ASCII bytes, plus (when `multibyte`) every multi-byte UTF-8 character.
struct CharSet {
    ByteClass ascii;
    bool multibyte = false;
    void invert() {
        for (int b = 0; b < 128; ++b) {
            if (ascii.has(static_cast<uint8_t>(b)))
                ascii.bits[b >> 6] &= ~(uint64_t{1} << (b & 63));
            else
                ascii.add(static_cast<uint8_t>(b));
        }
        multibyte = !multibyte;
    }
    void add_set(const CharSet& o) {
        for (int i = 0; i < 4; ++i) ascii.bits[i] |= o.ascii.bits[i];
        multibyte |= o.multibyte;
    }
};

class RegexCompiler {
  public:
    RegexCompiler(Grammar* g, std::string_view re, bool json) : g_(g), re_(re), json_(json) {}

    Result<int32_t> compile() {
        bool anchored_start = false, anchored_end = false;
        if (!re_.empty() && re_[0] == '^') anchored_start = true, pos_ = 1;
        size_t end = re_.size();
        if (end > pos_ && re_[end - 1] == '$' && (end < 2 || re_[end - 2] != '\\'))
            anchored_end = true, --end;
        re_ = re_.substr(0, end);
        GDN_ASSIGN_OR_RETURN(int32_t body, alternation(0));
        if (pos_ != re_.size()) return error("unexpected ')'");
        if (!json_ || (anchored_start && anchored_end)) return body;
        // JSON schema's pattern searches the string: free characters around an unanchored side.
        const int32_t any = g_->repeat(char_rule(any_char()), 0, -1, "pattern_free");
        Grammar::Seq s;
        if (!anchored_start) s.push_back(Grammar::ref(any));
        s.push_back(Grammar::ref(body));
        if (!anchored_end) s.push_back(Grammar::ref(any));
        const int32_t r = g_->new_rule("pattern");
        g_->add_alt(r, std::move(s));
        return r;
    }

  private:
    Status error(const std::string& what) const {
        return Status::error(strprintf("regex at %zu: %s", pos_, what.c_str()));
    }
    bool more() const { return pos_ < re_.size(); }
    char peek() const { return re_[pos_]; }

    CharSet any_char() const {
        CharSet c;
        c.ascii.add_range(0, 127);
        c.ascii.bits[0] &= ~(uint64_t{1} << '\n');
        c.multibyte = true;
        return c;
    }
    // The rule of one character of `c` (restricted to raw JSON string characters when json_).
    int32_t char_rule(CharSet c) {
        if (json_) {
            for (int b = 0; b < 0x20; ++b) c.ascii.bits[0] &= ~(uint64_t{1} << b);
            c.ascii.bits[0] &= ~(uint64_t{1} << '"');
            c.ascii.bits[1] &= ~(uint64_t{1} << ('\\' - 64));
        }
        const int32_t r = g_->new_rule("char");
        g_->add_alt(r, {Grammar::cls(c.ascii)});
        if (c.multibyte) {
            ByteClass cont, l2, l3, l4;
            cont.add_range(0x80, 0xbf);
            l2.add_range(0xc2, 0xdf);
            l3.add_range(0xe0, 0xef);
            l4.add_range(0xf0, 0xf4);
            g_->add_alt(r, {Grammar::cls(l2), Grammar::cls(cont)});
            g_->add_alt(r, {Grammar::cls(l3), Grammar::cls(cont), Grammar::cls(cont)});
            g_->add_alt(r, {Grammar::cls(l4), Grammar::cls(cont), Grammar::cls(cont), Grammar::cls(cont)});
        }
        return r;
    }

    Result<int32_t> alternation(int depth) {
        if (depth > kMaxNesting) return error("groups nest too deep");
        const int32_t r = g_->new_rule("alt");
        while (true) {
            GDN_ASSIGN_OR_RETURN(Grammar::Seq s, sequence(depth));
            g_->add_alt(r, std::move(s));
            if (more() && peek() == '|') {
                ++pos_;
                continue;
            }
            return r;
        }
    }

    Result<Grammar::Seq> sequence(int depth) {
        Grammar::Seq s;
        while (more() && peek() != '|' && peek() != ')') {
            GDN_ASSIGN_OR_RETURN(int32_t a, atom(depth));
            GDN_ASSIGN_OR_RETURN(int32_t q, quantified(a));
            s.push_back(Grammar::ref(q));
        }
        return s;
    }

    Result<int32_t> quantified(int32_t a) {
        if (!more()) return a;
        int64_t lo = 1, hi = 1;
        const char c = peek();
        if (c == '*')
            lo = 0, hi = -1, ++pos_;
        else if (c == '+')
            lo = 1, hi = -1, ++pos_;
        else if (c == '?')
            lo = 0, hi = 1, ++pos_;
        else if (c == '{') {
            const size_t close = re_.find('}', pos_);
            if (close == std::string_view::npos) return error("'{' without '}'");
            const std::string inner(re_.substr(pos_ + 1, close - pos_ - 1));
            const size_t comma = inner.find(',');
            auto num = [&](const std::string& t, int64_t* out) {
                if (t.empty() || t.size() > 4 || t.find_first_not_of("0123456789") != std::string::npos)
                    return false;
                *out = std::stoll(t);
                return true;
            };
            if (comma == std::string::npos) {
                if (!num(inner, &lo)) return error("bad {m}");
                hi = lo;
            } else {
                if (!num(inner.substr(0, comma), &lo)) return error("bad {m,n}");
                const std::string h = inner.substr(comma + 1);
                if (h.empty())
                    hi = -1;
                else if (!num(h, &hi) || hi < lo)
                    return error("bad {m,n}");
            }
            if (lo > kMaxRepeat || hi > kMaxRepeat)
                return error(strprintf("repetition above %lld", (long long)kMaxRepeat));
            pos_ = close + 1;
        } else {
            return a;
        }
        if (more() && (peek() == '?' || peek() == '+')) ++pos_;  // lazy / possessive: the same strings
        if (more() && (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{'))
            return error("a quantifier after a quantifier");
        return g_->repeat(a, lo, hi, "regex_repeat");
    }

    static CharSet named_class(char e) {  // \d \w \s
        CharSet c;
        if (e == 'd') c.ascii.add_range('0', '9');
        if (e == 'w')
            c.ascii.add_range('a', 'z'), c.ascii.add_range('A', 'Z'), c.ascii.add_range('0', '9'),
                c.ascii.add('_');
        if (e == 's')
            for (char x : std::string(" \t\n\r\f\v")) c.ascii.add(static_cast<uint8_t>(x));
        return c;
    }

    Result<CharSet> escape_set(bool in_class) {
        if (!more()) return error("'\\' at the end");
        const char e = re_[pos_++];
        CharSet c;
        switch (e) {
            case 'd':
            case 'w':
            case 's':
                return named_class(e);
            case 'D':
            case 'W':
            case 'S': {
                CharSet s = named_class(static_cast<char>(e - 'A' + 'a'));
                s.invert();
                return s;
            }
            case 'n':
                c.ascii.add('\n');
                return c;
            case 't':
                c.ascii.add('\t');
                return c;
            case 'r':
                c.ascii.add('\r');
                return c;
            case 'f':
                c.ascii.add('\f');
                return c;
            case 'v':
                c.ascii.add('\v');
                return c;
            case 'x': {
                if (pos_ + 2 > re_.size()) return error("bad \\x");
                const std::string h(re_.substr(pos_, 2));
                if (h.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
                    return error("bad \\x");
                const int v = std::stoi(h, nullptr, 16);
                if (v > 127) return error("\\x above 7f: write the character");
                c.ascii.add(static_cast<uint8_t>(v));
                pos_ += 2;
                return c;
            }
            default:
                if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
                    return error(std::string("\\") + e + " is not supported" +
                                 (in_class ? " in a class" : ""));
                c.ascii.add(static_cast<uint8_t>(e));
                return c;
        }
    }

    // One UTF-8 character at pos_ as literal bytes.
    std::string utf8_char() {
        const uint8_t c = static_cast<uint8_t>(re_[pos_]);
        const size_t n = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
        std::string s(re_.substr(pos_, n));
        pos_ += s.size();
        return s;
    }

    Result<int32_t> char_class() {
        ++pos_;  // '['
        bool negate = false;
        if (more() && peek() == '^') negate = true, ++pos_;
        CharSet set;
        bool first = true;
        while (more() && (peek() != ']' || first)) {
            first = false;
            CharSet item;
            int lo = -1;
            if (peek() == '\\') {
                ++pos_;
                GDN_ASSIGN_OR_RETURN(item, escape_set(true));
            } else if (static_cast<uint8_t>(peek()) >= 0x80) {
                return error("non-ASCII characters in a class are not supported (use an alternation)");
            } else {
                lo = static_cast<uint8_t>(re_[pos_++]);
                item.ascii.add(static_cast<uint8_t>(lo));
            }
            if (lo >= 0 && pos_ + 1 < re_.size() && peek() == '-' && re_[pos_ + 1] != ']') {
                ++pos_;
                const int hi = static_cast<uint8_t>(re_[pos_++]);
                if (hi >= 0x80 || hi < lo) return error("bad class range");
                item.ascii.add_range(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi));
            }
            set.add_set(item);
        }
        if (!more()) return error("'[' without ']'");
        ++pos_;  // ']'
        if (negate) set.invert();
        return char_rule(set);
    }

    Result<int32_t> atom(int depth) {
        const char c = peek();
        if (c == '(') {
            ++pos_;
            if (re_.substr(pos_, 2) == "?:")
                pos_ += 2;
            else if (more() && peek() == '?')
                return error("lookaround and named groups are not supported");
            GDN_ASSIGN_OR_RETURN(int32_t inner, alternation(depth + 1));
            if (!more() || peek() != ')') return error("'(' without ')'");
            ++pos_;
            return inner;
        }
        if (c == '[') return char_class();
        if (c == '.') {
            ++pos_;
            return char_rule(any_char());
        }
        if (c == '\\') {
            ++pos_;
            if (more() && peek() >= '1' && peek() <= '9') return error("backreferences are not supported");
            if (more() && (peek() == 'b' || peek() == 'B' || peek() == 'A' || peek() == 'z' || peek() == 'Z'))
                return error("word boundaries and anchors are not supported");
            GDN_ASSIGN_OR_RETURN(CharSet s, escape_set(false));
            return char_rule(s);
        }
        if (c == '*' || c == '+' || c == '?' || c == '{') return error("a quantifier with nothing before it");
        if (c == '^' || c == '$') return error("anchors are supported only at the start and the end");
        const std::string ch = utf8_char();
        if (ch.size() == 1) {
            CharSet s;
            s.ascii.add(static_cast<uint8_t>(ch[0]));
            return char_rule(s);
        }
        const int32_t r = g_->new_rule("literal");
        g_->add_alt(r, Grammar::literal(ch));
        return r;
    }

    Grammar* g_;
    std::string_view re_;
    bool json_;
    size_t pos_ = 0;
};

}  // namespace

Result<int32_t> regex_rule(Grammar* g, std::string_view re, bool in_json_string) {
    RegexCompiler c(g, re, in_json_string);
    return c.compile();
}

Result<std::shared_ptr<const Grammar>> regex_grammar(std::string_view re) {
    auto g = std::make_shared<Grammar>();
    g->set_budget(kMaxGrammarBytes);
    GDN_ASSIGN_OR_RETURN(int32_t r, regex_rule(g.get(), re, false));
    g->add_alt(g->root(), {Grammar::ref(r)});
    if (g->over_budget())
        return Status::error(strprintf("the regex compiles to more than %zu MiB of grammar (the limit)",
                                       kMaxGrammarBytes >> 20));
    return std::shared_ptr<const Grammar>(g);
}

}  // namespace gdn
