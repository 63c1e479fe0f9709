// GDN state snapshots for prefix caching, bookkeeping only (the states live in StateSlots slots; the
// engine copies them). A snapshot is the state of every GDN layer (conv window + recurrent state) after
// the whole prefix that a registered KV block ends: it is attached to that block, so the block's identity
// (BlockPool: every token of the prefix) is the snapshot's, and evicting the block drops the snapshot.
//
// At most `capacity` snapshots (--prefix-cache-memory / the snapshot size). Eviction: least recently
// used first among snapshots never hit, then among those that were (a position that was hit once, such
// as a shared system prompt or the end of a conversation's last turn, is likely to be hit again).
// Snapshots pinned for this step's restores are never chosen.
#pragma once

#include <cstdint>
#include <vector>

namespace gdn {

class SnapshotCache {
public:
    SnapshotCache(int32_t capacity, int32_t n_blocks);
    int32_t capacity() const { return capacity_; }
    int32_t size() const { return size_; }
    bool full() const { return size_ >= capacity_; }
    // The state slot of the snapshot after block b's prefix, or -1.
    int32_t slot_of(int32_t block) const { return slot_[block]; }
    bool was_hit(int32_t block) const { return hit_[block]; }
    // Attaches a snapshot held in `slot` to block b (which has none); the caller made room (evict_one).
    void add(int32_t block, int32_t slot);
    // Detaches block b's snapshot; returns its slot (-1 if it had none).
    int32_t remove(int32_t block);
    // Detaches the snapshot chosen by the eviction policy; returns its slot, or -1 if every one is pinned.
    int32_t evict_one();
    // A lookup restored from block b's snapshot: it moves to the recent end of the hit tier.
    void mark_hit(int32_t block);
    // Pinned snapshots are not evicted (a restore copy from them is pending).
    void pin(int32_t block);
    void unpin_all();
    int64_t evictions() const { return evictions_; }

private:
    struct List {
        int32_t head = -1, tail = -1;
    };
    void push(List& l, int32_t b);
    void unlink(List& l, int32_t b);

    int32_t capacity_, size_ = 0;
    std::vector<int32_t> slot_;
    std::vector<uint8_t> hit_, pinned_;
    std::vector<int32_t> prev_, next_;  // intrusive LRU links (head = least recent)
    List cold_, hot_;                   // never hit / hit before
    std::vector<int32_t> pins_;
    int64_t evictions_ = 0;
};

}  // namespace gdn
