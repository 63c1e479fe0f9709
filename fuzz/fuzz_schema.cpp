// JSON schemas are untrusted (response_format, tools' parameters): any bytes parsed as a request object
// would be, then compiled to a grammar, which then reads the input's own bytes. Never a crash, never more
// memory than the grammar budget allows (scripts/fuzz runs it with -rss_limit_mb), and a compiled grammar
// admits a finite document (the compiler refuses one that does not).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/completion_request.h"
#include "structured/grammar.h"
#include "structured/json_schema.h"
#include "structured/regex_grammar.h"
#include "util/json_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    auto schema = gdn::parse_json_limited(text, "schema", gdn::kRequestObjectLimits);
    if (schema) {
        auto g = gdn::json_schema_grammar(*schema);
        if (g) {
            if ((*g)->bytes() > gdn::kMaxGrammarBytes + (size_t{1} << 20)) std::abort();  // the budget held
            gdn::GrammarState st(g->get());
            st.advance_bytes(text.substr(0, 256));  // any bytes: accepted or refused, never a crash
        }
    }
    // The same bytes as a regex (structured_outputs.regex, a schema's pattern).
    if (size < 512) {
        auto r = gdn::regex_grammar(text);
        if (r) {
            gdn::GrammarState st(r->get());
            st.advance_bytes(text);
        }
    }
    return 0;
}
