// The two lexical stages of the Jinja subset (jinja.h): template source -> raw pieces (text, {{ }} and
// {% %} bodies, with @huggingface/jinja's whitespace control), and an expression's text -> tokens.
// Internal to the tokenizer's Jinja implementation (jinja.cpp, jinja_builtins.cpp).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace gdn::jinja {

enum class Tok { IDENT, STRING, INT, FLOAT, OP, END };

struct Token {
    Tok type;
    std::string text;
};

// The tokens of one {{ }} or {% %} body, ending with Tok::END.
Result<std::vector<Token>> lex_expression(const std::string& s);

struct RawPiece {
    enum Kind { TEXT, EXPR, STMT } kind;
    std::string s;
};

// A template's source as raw pieces, whitespace control applied.
Result<std::vector<RawPiece>> split_source(std::string src);

}  // namespace gdn::jinja
