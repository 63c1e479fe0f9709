// Prefix caching, the engine's part: where a request's GDN states are kept (the scheduler keeps them
// there and finds them again) and the state copies it asks for. The bookkeeping is in cache/ and the
// scheduler; this file only knows about prompts and templates.
#include <algorithm>

#include "engine/engine.h"

namespace gdn {

// Block-aligned positions of a new prompt whose state is worth keeping (rounded down to the block size):
//  - the ends of its last complete chat message and of a leading system message (render_chat): the next
//    turn of a conversation repeats everything up to there even when the template re-renders the answer
//    (Qwen3.5 drops earlier turns' reasoning; the generation prompt ends with "<think>\n"), and many
//    conversations share a system prompt;
//  - the end of the prompt (a retry, or the same prompt with other sampling parameters);
//  - every prefix_snapshot_interval tokens (long documents with different questions after them).
// The end of each generation is kept as it is decoded (Scheduler: decode-time snapshots).
std::vector<int64_t> Engine::snapshot_positions(const std::vector<int64_t>& message_ends, int64_t n) const {
    const int64_t bs = cfg_.block_size;
    std::vector<int64_t> at;
    auto keep = [&](int64_t p) {
        p = p / bs * bs;
        if (p > 0 && p <= n) at.push_back(p);
    };
    keep(n);
    if (cfg_.prefix_snapshot_interval > 0)
        for (int64_t p = cfg_.prefix_snapshot_interval; p < n; p += cfg_.prefix_snapshot_interval) keep(p);
    for (int64_t p : message_ends) keep(p);
    std::sort(at.begin(), at.end());
    at.erase(std::unique(at.begin(), at.end()), at.end());
    return at;
}

void Engine::do_state_copies(const std::vector<SlotCopy>& copies) {
    for (const SlotCopy& c : copies) slots_->copy(c.from, c.to);
}

}  // namespace gdn
