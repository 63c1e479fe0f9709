#include "cache/state_slots.h"

namespace gdn {

StateSlots::StateSlots(int n_gdn_layers, int64_t conv_floats, int64_t ssm_floats, int32_t n_slots)
    : ids_(n_slots, "state slot"), conv_n_(conv_floats), ssm_n_(ssm_floats) {
    for (int l = 0; l < n_gdn_layers; ++l) {
        conv_.emplace_back(static_cast<size_t>(n_slots) * conv_floats * sizeof(float), false);
        ssm_.emplace_back(static_cast<size_t>(n_slots) * ssm_floats * sizeof(float), false);
    }
}

}  // namespace gdn
