#include "cache/state_slots.h"

#include "core/log.h"

namespace gdn {

StateSlots::StateSlots(int n_gdn_layers, int64_t conv_floats, int64_t ssm_floats, int32_t n_slots)
    : n_slots_(n_slots), conv_n_(conv_floats), ssm_n_(ssm_floats), in_use_(n_slots, 0) {
    for (int l = 0; l < n_gdn_layers; ++l) {
        conv_.emplace_back(static_cast<size_t>(n_slots) * conv_floats * sizeof(float), false);
        ssm_.emplace_back(static_cast<size_t>(n_slots) * ssm_floats * sizeof(float), false);
    }
    for (int32_t s = n_slots - 1; s >= 0; --s) free_.push_back(s);
}

int32_t StateSlots::allocate() {
    if (free_.empty()) return -1;
    const int32_t s = free_.back();
    free_.pop_back();
    in_use_[s] = 1;
    return s;
}

void StateSlots::release(int32_t s) {
    GDN_CHECK(s >= 0 && s < n_slots_ && in_use_[s], "releasing state slot %d that is not in use", s);
    in_use_[s] = 0;
    free_.push_back(s);
}

}  // namespace gdn
