// A safetensors file's bytes: the header parser validates offsets, shapes and dtypes against the file
// size; every tensor it accepts lies inside the file.
#include <cstdint>
#include <cstdlib>

#include "model/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto entries = gdn::parse_safetensors_header(data, size, "fuzz.safetensors");
    if (!entries) return 0;
    for (const auto& e : *entries) {
        const auto* p = static_cast<const uint8_t*>(e.view.data);
        if (e.end > size || p < data || p + (e.end - e.begin) > data + size) std::abort();
        volatile uint8_t sink = 0;
        for (uint64_t i = 0; i < e.end - e.begin; ++i) sink = sink ^ p[i];  // ASan checks every byte
    }
    return 0;
}
