// config.json text: a ModelConfig whose derived sizes are consistent, or an error naming the key.
#include <cstdint>
#include <string>

#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto c =
        gdn::parse_model_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz/config.json");
    (void)c;
    return 0;
}
