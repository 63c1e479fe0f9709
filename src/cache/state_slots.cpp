#include "cache/state_slots.h"

namespace gdn {

StateSlots::StateSlots(int n_gdn_layers, int64_t conv_floats, int64_t ssm_floats, int32_t n_slots)
    : ids_(n_slots, "state slot"), n_slots_(n_slots), conv_n_(conv_floats), ssm_n_(ssm_floats) {
    const size_t states = static_cast<size_t>(n_gdn_layers) * n_slots;  // [layer][slot]
    conv_.allocate(states * conv_floats * sizeof(float), false);
    ssm_.allocate(states * ssm_floats * sizeof(float), false);
}

}  // namespace gdn
