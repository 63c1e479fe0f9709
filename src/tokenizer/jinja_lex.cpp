// Jinja's lexical stages (jinja_lex.h).
#include "tokenizer/jinja_lex.h"

#include <cctype>
#include <cstdlib>
#include <cstring>

#include "core/log.h"

namespace gdn::jinja {

Result<std::vector<Token>> lex_expression(const std::string& s) {
    std::vector<Token> out;
    size_t i = 0;
    while (i < s.size()) {
        const char c = s[i];
        if (isspace(static_cast<unsigned char>(c))) {
            ++i;
        } else if (isalpha(static_cast<unsigned char>(c)) || c == '_') {
            size_t j = i;
            while (j < s.size() && (isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
            out.push_back({Tok::IDENT, s.substr(i, j - i)});
            i = j;
        } else if (isdigit(static_cast<unsigned char>(c))) {
            size_t j = i;
            bool flt = false;
            while (j < s.size() &&
                   (isdigit(static_cast<unsigned char>(s[j])) ||
                    (s[j] == '.' && j + 1 < s.size() && isdigit(static_cast<unsigned char>(s[j + 1])))))
                flt |= s[j++] == '.';
            out.push_back({flt ? Tok::FLOAT : Tok::INT, s.substr(i, j - i)});
            i = j;
        } else if (c == '\'' || c == '"') {
            std::string v;
            size_t j = i + 1;
            while (j < s.size() && s[j] != c) {
                if (s[j] == '\\' && j + 1 < s.size()) {
                    const char e = s[++j];
                    switch (e) {
                        case 'n':
                            v += '\n';
                            break;
                        case 't':
                            v += '\t';
                            break;
                        case 'r':
                            v += '\r';
                            break;
                        case 'b':
                            v += '\b';
                            break;
                        case 'f':
                            v += '\f';
                            break;
                        case 'v':
                            v += '\v';
                            break;
                        case '0':
                            v += '\0';
                            break;
                        case '\\':
                            v += '\\';
                            break;
                        case '\'':
                            v += '\'';
                            break;
                        case '"':
                            v += '"';
                            break;
                        default:
                            v += '\\';
                            v += e;
                    }
                    ++j;
                } else {
                    v += s[j++];
                }
            }
            if (j >= s.size()) return Status::error("unterminated string literal in template");
            out.push_back({Tok::STRING, v});
            i = j + 1;
        } else {
            static const char* ops[] = {"==", "!=", "<=", ">=", "//", "**", "<", ">", "+", "-", "*", "/", "%",
                                        "~",  "(",  ")",  "[",  "]",  "{",  "}", ",", ":", ".", "|", "="};
            bool found = false;
            for (const char* op : ops) {
                const size_t n = std::strlen(op);
                if (s.compare(i, n, op) == 0) {
                    out.push_back({Tok::OP, op});
                    i += n;
                    found = true;
                    break;
                }
            }
            if (!found)
                return Status::error(strprintf("unexpected character '%c' in template expression", c));
        }
    }
    out.push_back({Tok::END, ""});
    return out;
}

namespace {

// lstrip_blocks, as the regular expression /^[ \t]*(\{[#%-])/gm -> "$1" (a line starts after \n or \r).
// Written as a loop: std::regex matches repetitions recursively and overflowed the stack on a long
// run of spaces.
std::string lstrip_blocks(const std::string& src) {
    std::string out;
    out.reserve(src.size());
    size_t i = 0;
    while (i < src.size()) {
        const bool line_start = i == 0 || src[i - 1] == '\n' || src[i - 1] == '\r';
        if (line_start) {
            size_t j = i;
            while (j < src.size() && (src[j] == ' ' || src[j] == '\t')) ++j;
            if (j > i && j + 1 < src.size() && src[j] == '{' &&
                (src[j + 1] == '#' || src[j + 1] == '%' || src[j + 1] == '-')) {
                out += src.substr(j, 2);
                i = j + 2;
                continue;
            }
        }
        out += src[i++];
    }
    return out;
}

// trim_blocks, as /([#%-]\})\n/g -> "$1".
std::string trim_blocks(const std::string& src) {
    std::string out;
    out.reserve(src.size());
    for (size_t i = 0; i < src.size(); ++i) {
        out += src[i];
        if ((src[i] == '#' || src[i] == '%' || src[i] == '-') && i + 2 < src.size() && src[i + 1] == '}' &&
            src[i + 2] == '\n') {
            out += '}';
            i += 2;
        }
    }
    return out;
}

}  // namespace

// Whitespace handling of @huggingface/jinja: a trailing newline is dropped, then lstrip_blocks and
// trim_blocks are applied with its regular expressions, then {%- / -%} strip adjacent whitespace.
Result<std::vector<RawPiece>> split_source(std::string src) {
    if (!src.empty() && src.back() == '\n') src.pop_back();
    src = lstrip_blocks(src);
    src = trim_blocks(src);
    std::vector<RawPiece> out;
    size_t i = 0;
    bool trim_next = false;
    auto is_ws = [](char c) {
        return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
    };
    while (i <= src.size()) {
        size_t open = src.find('{', i);
        while (open != std::string::npos && open + 1 < src.size() && src[open + 1] != '{' &&
               src[open + 1] != '%' && src[open + 1] != '#')
            open = src.find('{', open + 1);
        if (open + 1 >= src.size()) open = std::string::npos;
        std::string text = src.substr(i, open == std::string::npos ? std::string::npos : open - i);
        if (trim_next) {
            size_t k = 0;
            while (k < text.size() && is_ws(text[k])) ++k;
            text.erase(0, k);
            trim_next = false;
        }
        if (open == std::string::npos) {
            if (!text.empty()) out.push_back({RawPiece::TEXT, text});
            break;
        }
        const char kind = src[open + 1];
        const bool strip_before = open + 2 < src.size() && src[open + 2] == '-';
        if (strip_before)
            while (!text.empty() && is_ws(text.back())) text.pop_back();
        if (!text.empty()) out.push_back({RawPiece::TEXT, text});
        const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
        size_t body = open + 2 + (strip_before ? 1 : 0);
        // Find the closing delimiter outside string literals.
        size_t j = body;
        char quote = 0;
        for (; j + 1 < src.size(); ++j) {
            if (quote) {
                if (src[j] == '\\')
                    ++j;
                else if (src[j] == quote)
                    quote = 0;
            } else if (kind != '#' && (src[j] == '\'' || src[j] == '"')) {
                quote = src[j];
            } else if (src.compare(j, 2, close) == 0) {
                break;
            }
        }
        if (j + 1 >= src.size())
            return Status::error("chat template: unclosed '{" + std::string(1, kind) + "'");
        size_t end = j;
        if (end > body && src[end - 1] == '-') {
            trim_next = true;
            --end;
        }
        if (kind != '#')
            out.push_back({kind == '{' ? RawPiece::EXPR : RawPiece::STMT, src.substr(body, end - body)});
        i = j + 2;
    }
    return out;
}

}  // namespace gdn::jinja
