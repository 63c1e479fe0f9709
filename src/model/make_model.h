// Random-weight checkpoints in exactly the Hugging Face layout of each family, from a seed,
// deterministically: how tests and benchmarks get models of any size.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "model/config.h"

namespace gdn {

struct MakeModelOptions {
    std::string preset;  // see list_presets()
    std::string out_dir;
    uint64_t seed = 0;
    DType dtype = DType::BF16;  // dtype of the large tensors
    int shards = 1;             // > 1 writes model-0000i-of-0000n.safetensors + index
    std::string tokenizer_dir;  // copy tokenizer.json / tokenizer_config.json / chat_template.jinja from here
    int vocab_override = 0;     // > 0 replaces the preset's vocab size
    int layers_override = 0;    // > 0 replaces the preset's layer count
};

struct Preset {
    std::string name;
    std::string description;
};
std::vector<Preset> list_presets();

Status make_model(const MakeModelOptions& opt);

}  // namespace gdn
