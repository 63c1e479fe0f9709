// A GGUF file's bytes: the reader checks every count, length and offset against the file; every tensor it
// accepts lies inside the file, and every typed metadata read of an accepted file (and the model config
// and tokenizer made from it) stays inside it.
#include <cstdint>
#include <cstdlib>

#include "engine/gguf_tokenizer.h"
#include "model/gguf_config.h"
#include "model/gguf_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto f = gdn::GgufFile::parse(data, size, "fuzz.gguf");
    if (!f) return 0;
    for (const auto& t : (*f)->tensors()) {
        if (t.data < data || t.bytes > size || t.data + t.bytes > data + size) std::abort();
        volatile uint8_t sink = 0;
        for (uint64_t i = 0; i < t.bytes; ++i) sink = sink ^ t.data[i];  // ASan checks every byte
    }
    for (const auto& [key, v] : (*f)->metadata()) {
        (void)(*f)->get_string(key);
        (void)(*f)->get_int(key);
        (void)(*f)->get_float(key);
        (void)(*f)->get_bool(key);
        if (auto s = (*f)->get_strings(key))
            for (std::string_view x : *s) {
                volatile char c = x.empty() ? 0 : x.back();
                (void)c;
            }
        (void)(*f)->get_ints(key);
        (void)(*f)->get_floats(key);
    }
    (void)gdn::gguf_model_config(**f);  // every known key read with its type checked
    if (auto tok = gdn::gguf_tokenizer(**f)) (void)(*tok)->encode("Hello <|im_end|> world 123");
    return 0;
}
