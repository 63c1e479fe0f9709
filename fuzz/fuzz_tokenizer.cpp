// tokenizer.json text: loads or fails with a message; a loaded tokenizer encodes and decodes a fixed
// mixed-script text without crashing, and every id it makes is inside its vocabulary.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto t = gdn::Tokenizer::from_json(std::string(reinterpret_cast<const char*>(data), size), "",
                                       "fuzz/tokenizer.json");
    if (!t) return 0;
    const auto ids =
        (*t)->encode("Hello world 123 \xc3\xbcn\xc3\xaf <|im_start|> \xe4\xbd\xa0\xe5\xa5\xbd\n\n  x");
    for (int32_t id : ids)
        if (id < 0 || id >= (*t)->vocab_size()) std::abort();
    (void)(*t)->decode(ids, false);
    return 0;
}
