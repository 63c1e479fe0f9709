// GDN state snapshots for prefix caching, bookkeeping only (the states live in StateSlots slots; the
// engine copies them). A snapshot is the state of every GDN layer (conv window + recurrent state) after
// the whole prefix that a registered KV block ends: it is attached to that block, so the block's identity
// (BlockPool: every token of the prefix) is the snapshot's, and evicting the block drops the snapshot.
//
// At most `capacity` snapshots (--prefix-cache-memory / the snapshot size). Eviction: least recently
// used first among the "cold" snapshots, then among the "hot" ones, those hit at least hot_after_hits
// times (0: one LRU list). The engine uses 2, by the measurement in docs/perf.md (SnapshotEviction test):
// a shared system prompt is hit again and again, while a conversation's turn is hit once, by the next
// turn, which then leaves a newer snapshot; with 1 such spent snapshots crowded out the fresh ones.
// Snapshots pinned for this step's restores are never chosen.
#pragma once

#include <cstdint>
#include <vector>

namespace gdn {

class SnapshotCache {
  public:
    static constexpr int kDefaultHotAfterHits = 2;
    SnapshotCache(int32_t capacity, int32_t n_blocks, int hot_after_hits = kDefaultHotAfterHits);
    int32_t capacity() const { return capacity_; }
    int32_t size() const { return size_; }
    bool full() const { return size_ >= capacity_; }
    // The state slot of the snapshot after block b's prefix, or -1.
    int32_t slot_of(int32_t block) const { return slot_[block]; }
    bool was_hit(int32_t block) const { return hits_[block] > 0; }
    // Attaches a snapshot held in `slot` to block b (which has none); the caller made room (evict_one).
    void add(int32_t block, int32_t slot);
    // Detaches block b's snapshot; returns its slot (-1 if it had none).
    int32_t remove(int32_t block);
    // Detaches the snapshot chosen by the eviction policy; returns its slot, or -1 if every one is pinned.
    int32_t evict_one();
    // A lookup restored from block b's snapshot: it moves to the recent end of its tier (the hot one from
    // its hot_after_hits-th hit).
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

    List& list_of(int32_t b) { return in_hot_[b] ? hot_ : cold_; }

    int32_t capacity_, size_ = 0;
    int hot_after_hits_;
    std::vector<int32_t> slot_, hits_;
    std::vector<uint8_t> in_hot_, pinned_;
    std::vector<int32_t> prev_, next_;  // intrusive LRU links (head = least recent)
    List cold_, hot_;                   // never hit / hit before
    std::vector<int32_t> pins_;
    int64_t evictions_ = 0;
};

}  // namespace gdn
