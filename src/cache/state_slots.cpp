#include "cache/state_slots.h"

#include <cstring>

#include "core/log.h"

namespace gdn {

StateSlots::StateSlots(int n_gdn_layers, int64_t conv_floats, int64_t ssm_floats, int32_t n_slots)
    : ids_(n_slots, "state slot"),
      n_layers_(n_gdn_layers),
      n_slots_(n_slots),
      conv_n_(conv_floats),
      ssm_n_(ssm_floats) {
    const size_t states = static_cast<size_t>(n_gdn_layers) * n_slots;  // [layer][slot]
    conv_.allocate(states * conv_floats * sizeof(float), false);
    ssm_.allocate(states * ssm_floats * sizeof(float), false);
}

void StateSlots::reserve_verify_rows(int32_t n_seqs, int64_t tokens_per_seq, int64_t row_floats) {
    GDN_CHECK(n_seqs >= 0 && tokens_per_seq >= 0 && row_floats >= 0, "bad verify row reservation");
    verify_seqs_ = n_seqs;
    verify_tokens_ = tokens_per_seq;
    verify_row_ = row_floats;
    const size_t n = static_cast<size_t>(n_layers_) * n_seqs * tokens_per_seq * row_floats;
    if (n > 0) verify_.allocate(n * sizeof(float), false);
}

void StateSlots::copy(int32_t from, int32_t to) {
    GDN_CHECK(from >= 0 && from < n_slots_ && to >= 0 && to < n_slots_ && from != to,
              "bad state copy %d -> %d", from, to);
    for (int l = 0; l < n_layers_; ++l) {
        std::memcpy(conv(l, to), conv(l, from), conv_n_ * sizeof(float));
        std::memcpy(ssm(l, to), ssm(l, from), ssm_n_ * sizeof(float));
    }
}

}  // namespace gdn
