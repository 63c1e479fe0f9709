#include "cache/snapshot_cache.h"

#include "core/log.h"

namespace gdn {

SnapshotCache::SnapshotCache(int32_t capacity, int32_t n_blocks, int hot_after_hits)
    : capacity_(capacity),
      hot_after_hits_(hot_after_hits),
      slot_(n_blocks, -1),
      hits_(n_blocks, 0),
      in_hot_(n_blocks, 0),
      pinned_(n_blocks, 0),
      prev_(n_blocks, -1),
      next_(n_blocks, -1) {
    GDN_CHECK(capacity >= 0 && n_blocks >= 0);
    pins_.reserve(64);
}

void SnapshotCache::push(List& l, int32_t b) {
    prev_[b] = l.tail;
    next_[b] = -1;
    if (l.tail >= 0)
        next_[l.tail] = b;
    else
        l.head = b;
    l.tail = b;
}

void SnapshotCache::unlink(List& l, int32_t b) {
    if (prev_[b] >= 0)
        next_[prev_[b]] = next_[b];
    else
        l.head = next_[b];
    if (next_[b] >= 0)
        prev_[next_[b]] = prev_[b];
    else
        l.tail = prev_[b];
    prev_[b] = next_[b] = -1;
}

void SnapshotCache::add(int32_t block, int32_t slot) {
    GDN_CHECK(slot_[block] < 0, "block %d has a snapshot already", block);
    GDN_CHECK(size_ < capacity_, "snapshot cache over capacity");
    slot_[block] = slot;
    hits_[block] = in_hot_[block] = 0;
    push(cold_, block);
    ++size_;
}

int32_t SnapshotCache::remove(int32_t block) {
    const int32_t s = slot_[block];
    if (s < 0) return -1;
    unlink(list_of(block), block);
    slot_[block] = -1;
    hits_[block] = in_hot_[block] = 0;
    --size_;
    return s;
}

int32_t SnapshotCache::evict_one() {
    for (List* l : {&cold_, &hot_})
        for (int32_t b = l->head; b >= 0; b = next_[b])
            if (!pinned_[b]) {
                ++evictions_;
                return remove(b);
            }
    return -1;
}

void SnapshotCache::mark_hit(int32_t block) {
    GDN_CHECK(slot_[block] >= 0);
    unlink(list_of(block), block);
    ++hits_[block];
    in_hot_[block] = hot_after_hits_ > 0 && hits_[block] >= hot_after_hits_;
    push(list_of(block), block);
}

void SnapshotCache::pin(int32_t block) {
    if (!pinned_[block]) {
        pinned_[block] = 1;
        pins_.push_back(block);
    }
}

void SnapshotCache::unpin_all() {
    for (int32_t b : pins_) pinned_[b] = 0;
    pins_.clear();
}

}  // namespace gdn
