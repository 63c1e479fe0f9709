// Jinja parser and evaluator (see jinja.h for the supported subset; the lexical stages are in jinja_lex.cpp,
// the built-in methods and filters in jinja_builtins.cpp).
#include "tokenizer/jinja.h"

#include <cerrno>
#include <climits>
#include <cstdlib>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/log.h"
#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_lex.h"
#include "tokenizer/unicode.h"

namespace gdn::jinja {

// ------------------------------------------------------------------------------------------------
// Limits. A template comes from the checkpoint, but a corrupt or hostile one must be an error, not a
// stack overflow (parser and evaluator recurse on nesting) or an exhausted machine (loops).
constexpr int kMaxNesting = 200;                 // nested expressions, and nested blocks
constexpr int64_t kMaxRange = 1 << 20;           // items one range() may make
constexpr int64_t kMaxLoopIterations = 1 << 20;  // all loop iterations of one rendering
constexpr size_t kMaxOutputBytes = 64u << 20;    // rendered text

// Counts one level of nesting for as long as it lives.
struct NestingGuard {
    int& depth;
    explicit NestingGuard(int& d) : depth(++d) {}
    ~NestingGuard() { --depth; }
    bool too_deep() const { return depth > kMaxNesting; }
};

Status too_deep_error() {
    return Status::error(strprintf("chat template: nested more than %d levels deep", kMaxNesting));
}

// ------------------------------------------------------------------------------------------------
// AST

struct Env;

struct Expr {
    virtual ~Expr() = default;
    virtual EvalResult eval(Env& env) const = 0;
};
using ExprPtr = std::shared_ptr<Expr>;

struct Node {
    enum Kind { TEXT, OUTPUT, IF, FOR, SET, MACRO, BREAK, CONTINUE, BLOCK } kind = BLOCK;
    std::string text;  // TEXT
    ExprPtr expr;      // OUTPUT, SET value, FOR iterable
    std::vector<std::pair<ExprPtr, std::vector<std::shared_ptr<Node>>>> branches;  // IF (null cond = else)
    std::vector<std::string> targets;                     // FOR loop vars, SET target (a or ns.attr)
    ExprPtr filter;                                       // FOR ... if cond
    std::vector<std::shared_ptr<Node>> body, else_body;   // FOR / MACRO / BLOCK
    std::string name;                                     // MACRO
    std::vector<std::pair<std::string, ExprPtr>> params;  // MACRO (default may be null)
};
using NodePtr = std::shared_ptr<Node>;

struct Env {
    std::vector<std::map<std::string, Value>> scopes;
    std::string* out = nullptr;
    int depth = 0;
    int64_t iterations = 0;  // loop iterations so far (kMaxLoopIterations)
    Value lookup(const std::string& name) const {
        for (auto it = scopes.rbegin(); it != scopes.rend(); ++it) {
            auto f = it->find(name);
            if (f != it->end()) return f->second;
        }
        return Value();
    }
    void assign(const std::string& name, Value v) { scopes.back()[name] = std::move(v); }
};

namespace {

Status render_nodes(const std::vector<NodePtr>& nodes, Env& env, int* control);

// ------------------------------------------------------------------------------------------------
// Expression nodes

struct Literal : Expr {
    Value v;
    explicit Literal(Value x) : v(std::move(x)) {}
    EvalResult eval(Env&) const override { return v; }
};

struct Name : Expr {
    std::string name;
    explicit Name(std::string n) : name(std::move(n)) {}
    EvalResult eval(Env& env) const override { return env.lookup(name); }
};

struct ListExpr : Expr {
    std::vector<ExprPtr> items;
    EvalResult eval(Env& env) const override {
        Array a;
        for (const auto& e : items) {
            GDN_ASSIGN_OR_RETURN(Value v, e->eval(env));
            a.push_back(std::move(v));
        }
        return Value(std::move(a));
    }
};

struct DictExpr : Expr {
    std::vector<std::pair<ExprPtr, ExprPtr>> items;
    EvalResult eval(Env& env) const override {
        Value o{Object{}};
        for (const auto& [k, v] : items) {
            GDN_ASSIGN_OR_RETURN(Value kv, k->eval(env));
            GDN_ASSIGN_OR_RETURN(Value vv, v->eval(env));
            if (!kv.is_string()) return type_error("dict keys must be strings");
            o.set(kv.str(), std::move(vv));
        }
        return o;
    }
};

struct Attr : Expr {
    ExprPtr obj;
    std::string name;
    EvalResult eval(Env& env) const override {
        GDN_ASSIGN_OR_RETURN(Value o, obj->eval(env));
        return o.get(name);
    }
};

EvalResult index_value(const Value& o, const Value& k) {
    if (o.is_object()) return k.is_string() ? o.get(k.str()) : Value();
    if ((o.is_array() || o.is_string()) && k.is_number()) {
        std::vector<std::string> cps;
        if (o.is_string()) cps = code_points(o.str());
        const int64_t n =
            o.is_array() ? static_cast<int64_t>(o.arr().size()) : static_cast<int64_t>(cps.size());
        int64_t i = k.as_int();
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value();
        return o.is_array() ? o.arr()[i] : Value(cps[i]);
    }
    return Value();
}

struct Index : Expr {
    ExprPtr obj, key;
    EvalResult eval(Env& env) const override {
        GDN_ASSIGN_OR_RETURN(Value o, obj->eval(env));
        GDN_ASSIGN_OR_RETURN(Value k, key->eval(env));
        return index_value(o, k);
    }
};

struct Slice : Expr {
    ExprPtr obj, start, stop, step;
    EvalResult eval(Env& env) const override {
        GDN_ASSIGN_OR_RETURN(Value o, obj->eval(env));
        Value a, b, c;
        if (start) {
            GDN_ASSIGN_OR_RETURN(a, start->eval(env));
        }
        if (stop) {
            GDN_ASSIGN_OR_RETURN(b, stop->eval(env));
        }
        if (step) {
            GDN_ASSIGN_OR_RETURN(c, step->eval(env));
        }
        std::vector<Value> items;
        if (o.is_array())
            items = o.arr();
        else if (o.is_string())
            for (auto& cp : code_points(o.str())) items.push_back(Value(cp));
        else
            return type_error(std::string("cannot slice a ") + kind_name(o));
        const int64_t n = static_cast<int64_t>(items.size());
        const int64_t st = c.is_number() ? c.as_int() : 1;
        if (st == 0) return type_error("slice step cannot be zero");
        auto clamp = [&](const Value& v, int64_t def, bool is_start) {
            if (!v.is_number()) return def;
            int64_t x = v.as_int();
            if (x < 0) x += n;
            if (st > 0) return std::clamp<int64_t>(x, 0, n);
            return std::clamp<int64_t>(x, -1, n - 1);
            (void)is_start;
        };
        const int64_t lo = clamp(a, st > 0 ? 0 : n - 1, true), hi = clamp(b, st > 0 ? n : -1, false);
        std::vector<Value> out;
        for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) out.push_back(items[i]);
        if (o.is_array()) return Value(Array(out));
        std::string s;
        for (auto& v : out) s += v.str();
        return Value(s);
    }
};

struct Call : Expr {
    ExprPtr callee;  // a Name, an Attr (method call) or any expression yielding a function
    std::vector<ExprPtr> args;
    std::vector<std::pair<std::string, ExprPtr>> kwargs;
    EvalResult eval(Env& env) const override {
        CallArgs a;
        for (const auto& e : args) {
            GDN_ASSIGN_OR_RETURN(Value v, e->eval(env));
            a.positional.push_back(std::move(v));
        }
        for (const auto& [k, e] : kwargs) {
            GDN_ASSIGN_OR_RETURN(Value v, e->eval(env));
            a.keyword.emplace_back(k, std::move(v));
        }
        if (auto* at = dynamic_cast<Attr*>(callee.get())) {
            GDN_ASSIGN_OR_RETURN(Value self, at->obj->eval(env));
            Value f = self.get(at->name);
            if (f.is_function()) return f.fn()(a);
            return call_method(self, at->name, a);
        }
        GDN_ASSIGN_OR_RETURN(Value f, callee->eval(env));
        if (!f.is_function()) return type_error(std::string("cannot call a ") + kind_name(f));
        if (++env.depth > 64) return type_error("macro recursion too deep");
        auto r = f.fn()(a);
        --env.depth;
        return r;
    }
};

struct Unary : Expr {
    std::string op;
    ExprPtr e;
    EvalResult eval(Env& env) const override {
        GDN_ASSIGN_OR_RETURN(Value v, e->eval(env));
        if (op == "not") return Value(!v.truthy());
        if (v.kind() == Value::INT) return Value(-v.as_int());
        if (v.kind() == Value::FLOAT) return Value(-v.as_double());
        return type_error(std::string("cannot negate a ") + kind_name(v));
    }
};

bool value_in(const Value& needle, const Value& hay) {
    if (hay.is_string()) return needle.is_string() && hay.str().find(needle.str()) != std::string::npos;
    if (hay.is_array()) {
        for (const auto& v : hay.arr())
            if (v.equals(needle)) return true;
        return false;
    }
    if (hay.is_object()) return needle.is_string() && !hay.get(needle.str()).is_undefined();
    return false;
}

struct Binary : Expr {
    std::string op;
    ExprPtr l, r;
    EvalResult eval(Env& env) const override {
        GDN_ASSIGN_OR_RETURN(Value a, l->eval(env));
        if (op == "and") {
            if (!a.truthy()) return a;
            return r->eval(env);
        }
        if (op == "or") {
            if (a.truthy()) return a;
            return r->eval(env);
        }
        GDN_ASSIGN_OR_RETURN(Value b, r->eval(env));
        if (op == "==") return Value(a.equals(b));
        if (op == "!=") return Value(!a.equals(b));
        if (op == "in") return Value(value_in(a, b));
        if (op == "not in") return Value(!value_in(a, b));
        if (op == "~") return Value(a.to_string() + b.to_string());
        if (op == "<" || op == ">" || op == "<=" || op == ">=") {
            int c;
            if (a.is_number() && b.is_number())
                c = a.as_double() < b.as_double() ? -1 : a.as_double() > b.as_double();
            else if (a.is_string() && b.is_string())
                c = a.str().compare(b.str());
            else
                return type_error(std::string("cannot compare ") + kind_name(a) + " and " + kind_name(b));
            if (op == "<") return Value(c < 0);
            if (op == ">") return Value(c > 0);
            if (op == "<=") return Value(c <= 0);
            return Value(c >= 0);
        }
        if (op == "+") {
            if (a.is_string() && b.is_string()) return Value(a.str() + b.str());
            if (a.is_array() && b.is_array()) {
                Array c = a.arr();
                c.insert(c.end(), b.arr().begin(), b.arr().end());
                return Value(std::move(c));
            }
        }
        if (a.is_number() && b.is_number()) {
            const bool ints = a.kind() == Value::INT && b.kind() == Value::INT;
            const double x = a.as_double(), y = b.as_double();
            if (ints && (op == "+" || op == "-" || op == "*")) {
                // Python's ints do not overflow; ours are 64-bit, so an overflow is an error, never a wrap.
                int64_t r = 0;
                const bool over = op == "+"   ? __builtin_add_overflow(a.as_int(), b.as_int(), &r)
                                  : op == "-" ? __builtin_sub_overflow(a.as_int(), b.as_int(), &r)
                                              : __builtin_mul_overflow(a.as_int(), b.as_int(), &r);
                if (over) return type_error("integer overflow in " + op);
                return Value(r);
            }
            if (op == "+") return Value(x + y);
            if (op == "-") return Value(x - y);
            if (op == "*") return Value(x * y);
            if (op == "/") {
                if (y == 0) return type_error("division by zero");
                return Value(x / y);
            }
            if (op == "//" || op == "%") {
                if (y == 0) return type_error("division by zero");
                if (ints) {
                    if (b.as_int() == -1 && a.as_int() == INT64_MIN)
                        return type_error("integer overflow in " + op);
                    int64_t q = a.as_int() / b.as_int(), m = a.as_int() % b.as_int();
                    if (m != 0 && ((m < 0) != (b.as_int() < 0))) {
                        --q;
                        m += b.as_int();
                    }
                    return op == "//" ? Value(q) : Value(m);
                }
                const double q = std::floor(x / y);
                return op == "//" ? Value(q) : Value(x - q * y);
            }
        }
        if (op == "*" && a.is_string() && b.kind() == Value::INT) {
            if (b.as_int() > 0 && a.str().size() * static_cast<double>(b.as_int()) > kMaxOutputBytes)
                return type_error(strprintf("a repeated string of more than %zu MiB", kMaxOutputBytes >> 20));
            std::string s;
            for (int64_t i = 0; i < b.as_int(); ++i) s += a.str();
            return Value(s);
        }
        return type_error("unsupported operand types for " + op + ": " + kind_name(a) + " and " +
                          kind_name(b));
    }
};

struct Conditional : Expr {
    ExprPtr cond, yes, no;
    EvalResult eval(Env& env) const override {
        GDN_ASSIGN_OR_RETURN(Value c, cond->eval(env));
        if (c.truthy()) return yes->eval(env);
        return no ? no->eval(env) : EvalResult(Value());
    }
};

struct Filter : Expr {
    ExprPtr e;
    std::string name;
    std::vector<ExprPtr> args;
    EvalResult eval(Env& env) const override {
        GDN_ASSIGN_OR_RETURN(Value v, e->eval(env));
        CallArgs a;
        for (const auto& x : args) {
            GDN_ASSIGN_OR_RETURN(Value av, x->eval(env));
            a.positional.push_back(std::move(av));
        }
        return apply_filter(name, v, a);
    }
};

struct Test : Expr {
    ExprPtr e;
    std::string name;
    bool negate = false;
    std::vector<ExprPtr> args;
    EvalResult eval(Env& env) const override {
        GDN_ASSIGN_OR_RETURN(Value v, e->eval(env));
        bool r;
        if (name == "defined")
            r = !v.is_undefined();
        else if (name == "undefined")
            r = v.is_undefined();
        else if (name == "none")
            r = v.is_none();
        else if (name == "string")
            r = v.is_string();
        else if (name == "number")
            r = v.is_number();
        else if (name == "integer")
            r = v.kind() == Value::INT;
        else if (name == "float")
            r = v.kind() == Value::FLOAT;
        else if (name == "boolean")
            r = v.kind() == Value::BOOL;
        else if (name == "true")
            r = v.kind() == Value::BOOL && v.as_bool();
        else if (name == "false")
            r = v.kind() == Value::BOOL && !v.as_bool();
        else if (name == "mapping")
            r = v.is_object();
        else if (name == "sequence")
            r = v.is_array() || v.is_string();
        else if (name == "iterable")
            r = v.is_array() || v.is_string() || v.is_object();
        else if (name == "callable")
            r = v.is_function();
        else if (name == "odd" || name == "even")
            r = v.kind() == Value::INT && (v.as_int() % 2 != 0) == (name == "odd");
        else if (name == "equalto" || name == "eq" || name == "sameas") {
            if (args.empty()) return type_error(name + " test needs an argument");
            GDN_ASSIGN_OR_RETURN(Value o, args[0]->eval(env));
            r = v.equals(o);
        } else
            return type_error("unknown test '" + name + "'");
        return Value(negate ? !r : r);
    }
};

// ------------------------------------------------------------------------------------------------
// Parser

class Parser {
  public:
    explicit Parser(std::vector<Token> t) : t_(std::move(t)) {}
    int depth_ = 0;  // expression nesting (NestingGuard)
    Result<ExprPtr> expression() {
        NestingGuard g(depth_);
        if (g.too_deep()) return too_deep_error();
        return ternary();
    }
    bool at_end() const { return t_[p_].type == Tok::END; }
    const Token& peek(size_t k = 0) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
    bool accept_op(const char* op) {
        if (t_[p_].type == Tok::OP && t_[p_].text == op) return ++p_, true;
        return false;
    }
    bool accept_word(const char* w) {
        if (t_[p_].type == Tok::IDENT && t_[p_].text == w) return ++p_, true;
        return false;
    }
    Status expect_op(const char* op) {
        if (!accept_op(op))
            return Status::error(std::string("chat template: expected '") + op + "' near '" + t_[p_].text +
                                 "'");
        return Status::ok();
    }
    Result<std::string> ident() {
        if (t_[p_].type != Tok::IDENT)
            return Status::error("chat template: expected a name near '" + t_[p_].text + "'");
        return t_[p_++].text;
    }

  private:
    Result<ExprPtr> ternary() {
        GDN_ASSIGN_OR_RETURN(ExprPtr e, or_expr());
        if (accept_word("if")) {
            auto c = std::make_shared<Conditional>();
            c->yes = e;
            GDN_ASSIGN_OR_RETURN(c->cond, or_expr());
            if (accept_word("else")) {
                GDN_ASSIGN_OR_RETURN(c->no, ternary());
            }
            return ExprPtr(c);
        }
        return e;
    }
    ExprPtr bin(const std::string& op, ExprPtr l, ExprPtr r) {
        auto b = std::make_shared<Binary>();
        b->op = op;
        b->l = std::move(l);
        b->r = std::move(r);
        return b;
    }
    Result<ExprPtr> or_expr() {
        GDN_ASSIGN_OR_RETURN(ExprPtr e, and_expr());
        while (accept_word("or")) {
            GDN_ASSIGN_OR_RETURN(ExprPtr r, and_expr());
            e = bin("or", e, r);
        }
        return e;
    }
    Result<ExprPtr> and_expr() {
        GDN_ASSIGN_OR_RETURN(ExprPtr e, not_expr());
        while (accept_word("and")) {
            GDN_ASSIGN_OR_RETURN(ExprPtr r, not_expr());
            e = bin("and", e, r);
        }
        return e;
    }
    Result<ExprPtr> not_expr() {
        NestingGuard g(depth_);
        if (g.too_deep()) return too_deep_error();
        if (accept_word("not")) {
            auto u = std::make_shared<Unary>();
            u->op = "not";
            GDN_ASSIGN_OR_RETURN(u->e, not_expr());
            return ExprPtr(u);
        }
        return compare();
    }
    Result<ExprPtr> compare() {
        GDN_ASSIGN_OR_RETURN(ExprPtr e, concat());
        for (;;) {
            std::string op;
            for (const char* o : {"==", "!=", "<=", ">=", "<", ">"})
                if (accept_op(o)) {
                    op = o;
                    break;
                }
            if (op.empty()) {
                if (accept_word("in"))
                    op = "in";
                else if (peek().type == Tok::IDENT && peek().text == "not" && peek(1).type == Tok::IDENT &&
                         peek(1).text == "in") {
                    p_ += 2;
                    op = "not in";
                } else
                    break;
            }
            GDN_ASSIGN_OR_RETURN(ExprPtr r, concat());
            e = bin(op, e, r);
        }
        return e;
    }
    Result<ExprPtr> concat() {
        GDN_ASSIGN_OR_RETURN(ExprPtr e, sum());
        while (accept_op("~")) {
            GDN_ASSIGN_OR_RETURN(ExprPtr r, sum());
            e = bin("~", e, r);
        }
        return e;
    }
    Result<ExprPtr> sum() {
        GDN_ASSIGN_OR_RETURN(ExprPtr e, product());
        for (;;) {
            std::string op = accept_op("+") ? "+" : accept_op("-") ? "-" : "";
            if (op.empty()) break;
            GDN_ASSIGN_OR_RETURN(ExprPtr r, product());
            e = bin(op, e, r);
        }
        return e;
    }
    Result<ExprPtr> product() {
        GDN_ASSIGN_OR_RETURN(ExprPtr e, unary());
        for (;;) {
            std::string op = accept_op("//")  ? "//"
                             : accept_op("*") ? "*"
                             : accept_op("/") ? "/"
                             : accept_op("%") ? "%"
                                              : "";
            if (op.empty()) break;
            GDN_ASSIGN_OR_RETURN(ExprPtr r, unary());
            e = bin(op, e, r);
        }
        return e;
    }
    Result<ExprPtr> unary() {
        NestingGuard g(depth_);
        if (g.too_deep()) return too_deep_error();
        if (accept_op("-")) {
            auto u = std::make_shared<Unary>();
            u->op = "-";
            GDN_ASSIGN_OR_RETURN(u->e, unary());
            return ExprPtr(u);
        }
        if (accept_op("+")) return unary();
        GDN_ASSIGN_OR_RETURN(ExprPtr e, postfix());
        // Filters and tests bind tighter than arithmetic.
        for (;;) {
            if (accept_op("|")) {
                auto f = std::make_shared<Filter>();
                f->e = e;
                GDN_ASSIGN_OR_RETURN(f->name, ident());
                if (accept_op("(")) {
                    GDN_RETURN_IF_ERROR(arg_list(&f->args, nullptr));
                }
                e = f;
            } else if (accept_word("is")) {
                auto t = std::make_shared<Test>();
                t->e = e;
                t->negate = accept_word("not");
                GDN_ASSIGN_OR_RETURN(t->name, ident());
                if (accept_op("(")) {
                    GDN_RETURN_IF_ERROR(arg_list(&t->args, nullptr));
                } else if (peek().type != Tok::END && peek().type != Tok::OP && peek().type != Tok::IDENT) {
                    GDN_ASSIGN_OR_RETURN(ExprPtr a1, postfix());
                    t->args.push_back(a1);
                }
                e = t;
            } else {
                break;
            }
        }
        return e;
    }
    // After '(' : parses args up to ')'.
    Status arg_list(std::vector<ExprPtr>* args, std::vector<std::pair<std::string, ExprPtr>>* kwargs) {
        if (accept_op(")")) return Status::ok();
        for (;;) {
            if (kwargs && peek().type == Tok::IDENT && peek(1).type == Tok::OP && peek(1).text == "=") {
                std::string k = peek().text;
                p_ += 2;
                GDN_ASSIGN_OR_RETURN(ExprPtr v, expression());
                kwargs->emplace_back(k, v);
            } else {
                GDN_ASSIGN_OR_RETURN(ExprPtr v, expression());
                args->push_back(v);
            }
            if (accept_op(")")) return Status::ok();
            GDN_RETURN_IF_ERROR(expect_op(","));
        }
    }
    Result<ExprPtr> postfix() {
        GDN_ASSIGN_OR_RETURN(ExprPtr e, primary());
        for (;;) {
            if (accept_op(".")) {
                auto a = std::make_shared<Attr>();
                a->obj = e;
                GDN_ASSIGN_OR_RETURN(a->name, ident());
                e = a;
            } else if (accept_op("[")) {
                ExprPtr start, stop, step;
                bool is_slice = false;
                if (!(peek().type == Tok::OP && peek().text == ":")) {
                    GDN_ASSIGN_OR_RETURN(start, expression());
                }
                if (accept_op(":")) {
                    is_slice = true;
                    if (!(peek().type == Tok::OP && (peek().text == ":" || peek().text == "]"))) {
                        GDN_ASSIGN_OR_RETURN(stop, expression());
                    }
                    if (accept_op(":") && !(peek().type == Tok::OP && peek().text == "]")) {
                        GDN_ASSIGN_OR_RETURN(step, expression());
                    }
                }
                GDN_RETURN_IF_ERROR(expect_op("]"));
                if (is_slice) {
                    auto s = std::make_shared<Slice>();
                    s->obj = e;
                    s->start = start;
                    s->stop = stop;
                    s->step = step;
                    e = s;
                } else {
                    auto ix = std::make_shared<Index>();
                    ix->obj = e;
                    ix->key = start;
                    e = ix;
                }
            } else if (accept_op("(")) {
                auto c = std::make_shared<Call>();
                c->callee = e;
                GDN_RETURN_IF_ERROR(arg_list(&c->args, &c->kwargs));
                e = c;
            } else {
                return e;
            }
        }
    }
    Result<ExprPtr> primary() {
        const Token t = t_[p_];
        switch (t.type) {
            case Tok::STRING: {
                ++p_;
                std::string s = t.text;
                while (t_[p_].type == Tok::STRING) s += t_[p_++].text;  // adjacent literals concatenate
                return ExprPtr(std::make_shared<Literal>(Value(s)));
            }
            case Tok::INT:
            case Tok::FLOAT: {
                ++p_;
                errno = 0;
                char* end = nullptr;
                const bool is_int = t.type == Tok::INT;
                const long long i = is_int ? std::strtoll(t.text.c_str(), &end, 10) : 0;
                const double f = is_int ? 0.0 : std::strtod(t.text.c_str(), &end);
                if (errno == ERANGE)
                    return Status::error("chat template: number out of range '" + t.text + "'");
                return ExprPtr(std::make_shared<Literal>(is_int ? Value(static_cast<int64_t>(i)) : Value(f)));
            }
            case Tok::IDENT: {
                ++p_;
                if (t.text == "true" || t.text == "True")
                    return ExprPtr(std::make_shared<Literal>(Value(true)));
                if (t.text == "false" || t.text == "False")
                    return ExprPtr(std::make_shared<Literal>(Value(false)));
                if (t.text == "none" || t.text == "None")
                    return ExprPtr(std::make_shared<Literal>(Value::none()));
                return ExprPtr(std::make_shared<Name>(t.text));
            }
            case Tok::OP: {
                if (accept_op("(")) {
                    GDN_ASSIGN_OR_RETURN(ExprPtr e, expression());
                    if (accept_op(",")) {  // tuple -> list
                        auto l = std::make_shared<ListExpr>();
                        l->items.push_back(e);
                        while (!accept_op(")")) {
                            GDN_ASSIGN_OR_RETURN(ExprPtr x, expression());
                            l->items.push_back(x);
                            accept_op(",");
                        }
                        return ExprPtr(l);
                    }
                    GDN_RETURN_IF_ERROR(expect_op(")"));
                    return e;
                }
                if (accept_op("[")) {
                    auto l = std::make_shared<ListExpr>();
                    while (!accept_op("]")) {
                        GDN_ASSIGN_OR_RETURN(ExprPtr x, expression());
                        l->items.push_back(x);
                        if (!accept_op(",")) {
                            GDN_RETURN_IF_ERROR(expect_op("]"));
                            break;
                        }
                    }
                    return ExprPtr(l);
                }
                if (accept_op("{")) {
                    auto d = std::make_shared<DictExpr>();
                    while (!accept_op("}")) {
                        GDN_ASSIGN_OR_RETURN(ExprPtr k, expression());
                        GDN_RETURN_IF_ERROR(expect_op(":"));
                        GDN_ASSIGN_OR_RETURN(ExprPtr v, expression());
                        d->items.emplace_back(k, v);
                        if (!accept_op(",")) {
                            GDN_RETURN_IF_ERROR(expect_op("}"));
                            break;
                        }
                    }
                    return ExprPtr(d);
                }
                break;
            }
            case Tok::END:
                break;
        }
        return Status::error("chat template: unexpected '" + t.text + "' in expression");
    }

    std::vector<Token> t_;
    size_t p_ = 0;
};

class TreeBuilder {
  public:
    explicit TreeBuilder(std::vector<RawPiece> p) : p_(std::move(p)) {}
    int depth_ = 0;  // block nesting (NestingGuard)

    // Parses nodes until a statement whose first word is in `stops` (returned in *stop_word).
    Status block(std::vector<NodePtr>* out, const std::vector<std::string>& stops, std::string* stop_word,
                 Parser** stop_parser) {
        NestingGuard g(depth_);
        if (g.too_deep()) return too_deep_error();
        while (i_ < p_.size()) {
            RawPiece& rp = p_[i_++];
            if (rp.kind == RawPiece::TEXT) {
                auto n = std::make_shared<Node>();
                n->kind = Node::TEXT;
                n->text = rp.s;
                out->push_back(n);
                continue;
            }
            GDN_ASSIGN_OR_RETURN(std::vector<Token> toks, lex_expression(rp.s));
            parsers_.push_back(std::make_unique<Parser>(std::move(toks)));
            Parser& ps = *parsers_.back();
            if (rp.kind == RawPiece::EXPR) {
                auto n = std::make_shared<Node>();
                n->kind = Node::OUTPUT;
                GDN_ASSIGN_OR_RETURN(n->expr, ps.expression());
                if (!ps.at_end())
                    return Status::error("chat template: unexpected '" + ps.peek().text + "' in {{ }}");
                out->push_back(n);
                continue;
            }
            GDN_ASSIGN_OR_RETURN(std::string word, ps.ident());
            if (std::find(stops.begin(), stops.end(), word) != stops.end()) {
                *stop_word = word;
                *stop_parser = &ps;
                return Status::ok();
            }
            GDN_RETURN_IF_ERROR(statement(word, ps, out));
        }
        if (!stops.empty()) return Status::error("chat template: missing {% " + stops.back() + " %}");
        return Status::ok();
    }

  private:
    Status statement(const std::string& word, Parser& ps, std::vector<NodePtr>* out) {
        auto n = std::make_shared<Node>();
        std::string stop;
        Parser* sp = nullptr;
        if (word == "if") {
            n->kind = Node::IF;
            GDN_ASSIGN_OR_RETURN(ExprPtr cond, ps.expression());
            for (;;) {
                std::vector<NodePtr> body;
                GDN_RETURN_IF_ERROR(block(&body, {"elif", "else", "endif"}, &stop, &sp));
                n->branches.emplace_back(cond, std::move(body));
                if (stop == "elif") {
                    GDN_ASSIGN_OR_RETURN(cond, sp->expression());
                } else if (stop == "else") {
                    std::vector<NodePtr> eb;
                    GDN_RETURN_IF_ERROR(block(&eb, {"endif"}, &stop, &sp));
                    n->branches.emplace_back(nullptr, std::move(eb));
                    break;
                } else {
                    break;
                }
            }
        } else if (word == "for") {
            n->kind = Node::FOR;
            do {
                GDN_ASSIGN_OR_RETURN(std::string t, ps.ident());
                n->targets.push_back(t);
            } while (ps.accept_op(","));
            if (!ps.accept_word("in")) return Status::error("chat template: expected 'in' in for loop");
            GDN_ASSIGN_OR_RETURN(n->expr, ps.expression());
            // `for x in xs if cond`: the ternary parser consumed "xs if cond" as a conditional without else.
            if (auto* c = dynamic_cast<Conditional*>(n->expr.get()); c && !c->no) {
                n->filter = c->cond;
                n->expr = c->yes;
            }
            ps.accept_word("recursive");
            GDN_RETURN_IF_ERROR(block(&n->body, {"else", "endfor"}, &stop, &sp));
            if (stop == "else") GDN_RETURN_IF_ERROR(block(&n->else_body, {"endfor"}, &stop, &sp));
        } else if (word == "set") {
            n->kind = Node::SET;
            GDN_ASSIGN_OR_RETURN(std::string t, ps.ident());
            if (ps.accept_op(".")) {
                GDN_ASSIGN_OR_RETURN(std::string attr, ps.ident());
                t += "." + attr;
            }
            n->targets.push_back(t);
            GDN_RETURN_IF_ERROR(ps.expect_op("="));
            GDN_ASSIGN_OR_RETURN(n->expr, ps.expression());
        } else if (word == "macro") {
            n->kind = Node::MACRO;
            GDN_ASSIGN_OR_RETURN(n->name, ps.ident());
            GDN_RETURN_IF_ERROR(ps.expect_op("("));
            while (!ps.accept_op(")")) {
                GDN_ASSIGN_OR_RETURN(std::string pn, ps.ident());
                ExprPtr def;
                if (ps.accept_op("=")) {
                    GDN_ASSIGN_OR_RETURN(def, ps.expression());
                }
                n->params.emplace_back(pn, def);
                if (!ps.accept_op(",")) {
                    GDN_RETURN_IF_ERROR(ps.expect_op(")"));
                    break;
                }
            }
            GDN_RETURN_IF_ERROR(block(&n->body, {"endmacro"}, &stop, &sp));
        } else if (word == "generation" || word == "endgeneration") {
            return Status::ok();  // assistant-mask markers: no output of their own
        } else if (word == "break" || word == "continue") {
            n->kind = word == "break" ? Node::BREAK : Node::CONTINUE;
        } else {
            return Status::error("chat template: unsupported statement '{% " + word + " %}'");
        }
        if (!ps.at_end() && n->kind != Node::IF && n->kind != Node::FOR && n->kind != Node::MACRO)
            return Status::error("chat template: unexpected '" + ps.peek().text + "' after {% " + word);
        out->push_back(n);
        return Status::ok();
    }

    std::vector<RawPiece> p_;
    size_t i_ = 0;
    std::vector<std::unique_ptr<Parser>> parsers_;
};

// ------------------------------------------------------------------------------------------------
// Rendering

enum Control { NONE = 0, BREAK = 1, CONTINUE = 2 };

Status render_nodes(const std::vector<NodePtr>& nodes, Env& env, int* control) {
    for (const NodePtr& n : nodes) {
        if (env.out->size() > kMaxOutputBytes)
            return Status::error(
                strprintf("chat template: the rendered text exceeds %zu MiB", kMaxOutputBytes >> 20));
        switch (n->kind) {
            case Node::TEXT:
                *env.out += n->text;
                break;
            case Node::OUTPUT: {
                GDN_ASSIGN_OR_RETURN(Value v, n->expr->eval(env));
                *env.out += v.to_string();
                break;
            }
            case Node::IF: {
                for (const auto& [cond, body] : n->branches) {
                    bool take = true;
                    if (cond) {
                        GDN_ASSIGN_OR_RETURN(Value c, cond->eval(env));
                        take = c.truthy();
                    }
                    if (take) {
                        GDN_RETURN_IF_ERROR(render_nodes(body, env, control));
                        break;
                    }
                }
                if (*control) return Status::ok();
                break;
            }
            case Node::FOR: {
                GDN_ASSIGN_OR_RETURN(Value it, n->expr->eval(env));
                Array items;
                if (it.is_array())
                    items = it.arr();
                else if (it.is_object())
                    for (const auto& [k, v] : it.obj()) items.push_back(Value(k));
                else if (it.is_string())
                    for (auto& cp : code_points(it.str())) items.push_back(Value(cp));
                else if (!it.is_undefined() && !it.is_none())
                    return type_error(std::string("cannot iterate over a ") + kind_name(it));
                // Loop filter applies before loop.* indices are assigned.
                auto bind = [&](const Value& item) {
                    if (n->targets.size() == 1)
                        env.assign(n->targets[0], item);
                    else
                        for (size_t k = 0; k < n->targets.size(); ++k)
                            env.assign(n->targets[k],
                                       item.is_array() && k < item.arr().size() ? item.arr()[k] : Value());
                };
                if (n->filter) {
                    Array kept;
                    env.scopes.emplace_back();
                    for (const Value& item : items) {
                        bind(item);
                        GDN_ASSIGN_OR_RETURN(Value c, n->filter->eval(env));
                        if (c.truthy()) kept.push_back(item);
                    }
                    env.scopes.pop_back();
                    items.swap(kept);
                }
                if (items.empty()) {
                    GDN_RETURN_IF_ERROR(render_nodes(n->else_body, env, control));
                    break;
                }
                env.scopes.emplace_back();
                const int64_t len = static_cast<int64_t>(items.size());
                for (int64_t k = 0; k < len; ++k) {
                    if (++env.iterations > kMaxLoopIterations)
                        return Status::error(strprintf("chat template: more than %lld loop iterations",
                                                       (long long)kMaxLoopIterations));
                    bind(items[k]);
                    Value loop{Object{}};
                    loop.set("index0", Value(k));
                    loop.set("index", Value(k + 1));
                    loop.set("revindex0", Value(len - k - 1));
                    loop.set("revindex", Value(len - k));
                    loop.set("first", Value(k == 0));
                    loop.set("last", Value(k == len - 1));
                    loop.set("length", Value(len));
                    loop.set("previtem", k > 0 ? items[k - 1] : Value());
                    loop.set("nextitem", k + 1 < len ? items[k + 1] : Value());
                    env.assign("loop", loop);
                    int ctl = NONE;
                    Status st = render_nodes(n->body, env, &ctl);
                    if (!st) {
                        env.scopes.pop_back();
                        return st;
                    }
                    if (ctl == BREAK) break;
                }
                env.scopes.pop_back();
                break;
            }
            case Node::SET: {
                GDN_ASSIGN_OR_RETURN(Value v, n->expr->eval(env));
                const std::string& t = n->targets[0];
                const size_t dot = t.find('.');
                if (dot == std::string::npos) {
                    env.assign(t, v);
                } else {
                    Value ns = env.lookup(t.substr(0, dot));
                    if (!ns.is_object())
                        return type_error("cannot set an attribute on a " + std::string(kind_name(ns)));
                    ns.set(t.substr(dot + 1), v);  // objects are shared: namespaces update in place
                }
                break;
            }
            case Node::MACRO: {
                NodePtr def = n;
                Env* outer = &env;
                Function f = [def, outer](CallArgs& a) -> EvalResult {
                    Env& e = *outer;
                    e.scopes.emplace_back();
                    for (size_t k = 0; k < def->params.size(); ++k) {
                        Value v = arg(a, k, def->params[k].first.c_str());
                        if (v.is_undefined() && def->params[k].second) {
                            GDN_ASSIGN_OR_RETURN(v, def->params[k].second->eval(e));
                        }
                        e.assign(def->params[k].first, v);
                    }
                    std::string buf;
                    std::string* saved = e.out;
                    e.out = &buf;
                    int ctl = NONE;
                    Status st = render_nodes(def->body, e, &ctl);
                    e.out = saved;
                    e.scopes.pop_back();
                    if (!st) return st;
                    return Value(buf);
                };
                env.assign(n->name, Value(f));
                break;
            }
            case Node::BREAK:
                *control = BREAK;
                return Status::ok();
            case Node::CONTINUE:
                *control = CONTINUE;
                return Status::ok();
            case Node::BLOCK:
                GDN_RETURN_IF_ERROR(render_nodes(n->body, env, control));
                break;
        }
    }
    return Status::ok();
}

}  // namespace

Result<Template> Template::parse(const std::string& source) {
    GDN_ASSIGN_OR_RETURN(std::vector<RawPiece> pieces, split_source(source));
    TreeBuilder tb(std::move(pieces));
    auto root = std::make_shared<Node>();
    root->kind = Node::BLOCK;
    std::string stop;
    Parser* sp = nullptr;
    GDN_RETURN_IF_ERROR(tb.block(&root->body, {}, &stop, &sp));
    Template t;
    t.root_ = root;
    return t;
}

Result<std::string> Template::render(const Value& context) const {
    std::string out;
    Env env;
    env.out = &out;
    env.scopes.emplace_back();
    auto& globals = env.scopes.back();
    globals["raise_exception"] = Value(Function([](CallArgs& a) -> EvalResult {
        return Status::error("chat template raised: " +
                             (a.positional.empty() ? "" : a.positional[0].to_string()));
    }));
    globals["namespace"] = Value(Function([](CallArgs& a) -> EvalResult {
        Value ns{Object{}};
        for (auto& [k, v] : a.keyword) ns.set(k, v);
        return ns;
    }));
    globals["range"] = Value(Function([](CallArgs& a) -> EvalResult {
        int64_t start = 0, stop = 0, step = 1;
        if (a.positional.size() == 1)
            stop = a.positional[0].as_int();
        else if (a.positional.size() >= 2) {
            start = a.positional[0].as_int();
            stop = a.positional[1].as_int();
            if (a.positional.size() > 2) step = a.positional[2].as_int();
        }
        if (step == 0) return type_error("range() step cannot be zero");
        // The item count in 128 bits: start + k * step never overflows (no signed wrap-around).
        const __int128 span = static_cast<__int128>(stop) - start, st = step;
        const __int128 count =
            st > 0 ? (span > 0 ? (span + st - 1) / st : 0) : (span < 0 ? (-span + -st - 1) / -st : 0);
        if (count > kMaxRange)
            return type_error(strprintf("range() of more than %lld items", (long long)kMaxRange));
        Array r;
        for (int64_t k = 0; k < static_cast<int64_t>(count); ++k)
            r.push_back(Value(static_cast<int64_t>(start + st * k)));
        return Value(std::move(r));
    }));
    if (context.is_object())
        for (const auto& [k, v] : context.obj()) globals[k] = v;
    env.scopes.emplace_back();  // template-level assignments
    int ctl = NONE;
    GDN_RETURN_IF_ERROR(render_nodes(root_->body, env, &ctl));
    return out;
}

}  // namespace gdn::jinja
