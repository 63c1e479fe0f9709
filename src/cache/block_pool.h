// KV block bookkeeping, pure logic (no tensors; the arenas are in KvCache): ids, reference counts and, for
// prefix caching, the identity of every full block and an LRU of free-but-cached blocks.
//
// A block is in one of three states:
//   in use      refcount >= 1 (one per request whose block table holds it; shared blocks are read-only)
//   cached      refcount 0, still registered by content: kept in the LRU, evicted only when an
//               allocation finds no plain free block (least recently released first)
//   free        refcount 0, unregistered: on the free list
//
// Identity: a committed block is registered under (parent block, parent generation, its block_size
// tokens). The parent is the cached block before it in the sequence (-1 for the first block), so by
// induction a block stands for every token of its prefix. A 64-bit chained hash of the prefix picks the
// bucket; a lookup then compares the parent, its generation and the tokens exactly, so a hash collision
// can cost a probe, never a wrong hit (the test hook below forces collisions). Each (re)registration
// bumps the block's generation, so a child whose parent was evicted and reused no longer matches.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace gdn {

class BlockPool {
  public:
    // block_size: tokens per block (the identity covers that many tokens); 0 when caching is never used.
    explicit BlockPool(int32_t n_blocks, int32_t block_size = 0);
    int32_t n_blocks() const { return n_; }
    int32_t block_size() const { return block_size_; }
    // Blocks an allocation can get: free plus cached-and-unused (evictable).
    int32_t n_free() const { return static_cast<int32_t>(free_.size()) + n_lru_; }
    int32_t n_cached() const { return n_registered_; }  // registered blocks, in use or not
    int32_t n_lru() const { return n_lru_; }
    // A block with refcount 1: a free one, else the least recently used cached one (evicted: unregistered,
    // the eviction listener told first). -1 when every block is in use.
    int32_t allocate();
    // Drops one reference; at zero a registered block goes to the LRU's recent end, others to the free list.
    void release(int32_t b);
    int32_t refcount(int32_t b) const { return ref_[b]; }

    // Prefix caching. The registered block holding `tokens` (block_size of them) after `parent` (-1: the
    // sequence's first block), or -1.
    int32_t find(int32_t parent, const int32_t* tokens) const;
    // One more reference to a block found by find() (taken out of the LRU if it was unused).
    void acquire(int32_t b);
    // Registers in-use block b as holding `tokens` after `parent` (-1 or a registered block). False (b stays
    // private) when an identical block is registered already, or caching is off.
    bool commit(int32_t b, int32_t parent, const int32_t* tokens);
    bool registered(int32_t b) const { return gen_[b] & 1; }
    // Unregisters every unused cached block (they go to the free list; the listener hears of each).
    void clear_cache();

    // Called with a block id just before it loses its registration (eviction or clear_cache).
    void set_eviction_listener(std::function<void(int32_t)> f) { on_evict_ = std::move(f); }
    int64_t evictions() const { return evictions_; }
    // Test hook: replaces the hash of (parent hash, tokens) (e.g. a constant, forcing every block into one
    // bucket). Set before any commit.
    using HashFn = std::function<uint64_t(uint64_t parent_hash, const int32_t* tokens, int32_t n)>;
    void set_hash_for_testing(HashFn f) { hash_fn_ = std::move(f); }
    static uint64_t chain_hash(uint64_t parent_hash, const int32_t* tokens, int32_t n);

  private:
    uint64_t hash_of(int32_t parent, const int32_t* tokens) const;
    void unregister(int32_t b);
    void lru_push(int32_t b);
    void lru_remove(int32_t b);
    bool matches(int32_t b, int32_t parent, const int32_t* tokens) const;

    int32_t n_, block_size_;
    std::vector<int32_t> ref_;
    std::vector<int32_t> free_;  // LIFO free list (unregistered, unused)
    // Identity (registered blocks): generation is odd while registered.
    std::vector<uint32_t> gen_;
    std::vector<int32_t> parent_;
    std::vector<uint32_t> parent_gen_;
    std::vector<uint64_t> hash_;
    std::vector<int32_t> tokens_;  // [n, block_size]
    // Hash buckets: intrusive singly linked lists through next_in_bucket_.
    std::vector<int32_t> bucket_head_, next_in_bucket_;
    uint64_t bucket_mask_ = 0;
    // LRU of registered unused blocks: intrusive doubly linked list, head = least recently released.
    std::vector<int32_t> lru_prev_, lru_next_;
    int32_t lru_head_ = -1, lru_tail_ = -1, n_lru_ = 0;
    int32_t n_registered_ = 0;
    int64_t evictions_ = 0;
    std::function<void(int32_t)> on_evict_;
    HashFn hash_fn_;
};

}  // namespace gdn
