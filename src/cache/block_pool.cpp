#include "cache/block_pool.h"

#include <algorithm>
#include <cstring>

#include "core/log.h"

namespace gdn {

BlockPool::BlockPool(int32_t n_blocks, int32_t block_size)
    : n_(n_blocks),
      block_size_(block_size),
      ref_(n_blocks, 0),
      gen_(n_blocks, 0),
      parent_(n_blocks, -1),
      parent_gen_(n_blocks, 0),
      hash_(n_blocks, 0),
      next_in_bucket_(n_blocks, -1),
      lru_prev_(n_blocks, -1),
      lru_next_(n_blocks, -1) {
    GDN_CHECK(n_blocks >= 0 && block_size >= 0);
    free_.reserve(n_blocks);
    for (int32_t b = n_blocks - 1; b >= 0; --b) free_.push_back(b);  // block 0 handed out first
    if (block_size > 0) {
        tokens_.assign(static_cast<size_t>(n_blocks) * block_size, 0);
        size_t nb = 16;
        while (nb < 2 * static_cast<size_t>(n_blocks)) nb *= 2;
        bucket_head_.assign(nb, -1);
        bucket_mask_ = nb - 1;
    }
}

uint64_t BlockPool::chain_hash(uint64_t h, const int32_t* tokens, int32_t n) {
    // FNV-1a over the token bytes, seeded with the parent's hash, then a 64-bit finalizer (splitmix).
    h ^= 0xcbf29ce484222325ull;
    for (int32_t i = 0; i < n; ++i) {
        uint32_t t = static_cast<uint32_t>(tokens[i]);
        for (int k = 0; k < 4; ++k, t >>= 8) h = (h ^ (t & 0xff)) * 0x100000001b3ull;
    }
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

uint64_t BlockPool::hash_of(int32_t parent, const int32_t* tokens) const {
    const uint64_t ph = parent < 0 ? 0 : hash_[parent];
    return hash_fn_ ? hash_fn_(ph, tokens, block_size_) : chain_hash(ph, tokens, block_size_);
}

bool BlockPool::matches(int32_t b, int32_t parent, const int32_t* tokens) const {
    if (!registered(b) || parent_[b] != parent) return false;
    if (parent >= 0 && (!registered(parent) || parent_gen_[b] != gen_[parent])) return false;
    return std::memcmp(&tokens_[static_cast<size_t>(b) * block_size_], tokens,
                       block_size_ * sizeof(int32_t)) == 0;
}

int32_t BlockPool::find(int32_t parent, const int32_t* tokens) const {
    if (block_size_ == 0) return -1;
    if (parent >= 0 && !registered(parent)) return -1;
    const uint64_t h = hash_of(parent, tokens);
    for (int32_t b = bucket_head_[h & bucket_mask_]; b >= 0; b = next_in_bucket_[b])
        if (hash_[b] == h && matches(b, parent, tokens)) return b;
    return -1;
}

bool BlockPool::commit(int32_t b, int32_t parent, const int32_t* tokens) {
    GDN_CHECK(b >= 0 && b < n_ && ref_[b] > 0, "committing block %d that is not in use", b);
    if (block_size_ == 0 || registered(b)) return false;
    if (parent >= 0 && !registered(parent)) return false;  // its prefix is no longer identifiable
    if (find(parent, tokens) >= 0) return false;           // a copy is cached already: b stays private
    const uint64_t h = hash_of(parent, tokens);
    ++gen_[b];  // odd: registered
    parent_[b] = parent;
    parent_gen_[b] = parent < 0 ? 0 : gen_[parent];
    hash_[b] = h;
    std::memcpy(&tokens_[static_cast<size_t>(b) * block_size_], tokens, block_size_ * sizeof(int32_t));
    int32_t& head = bucket_head_[h & bucket_mask_];
    next_in_bucket_[b] = head;
    head = b;
    ++n_registered_;
    return true;
}

void BlockPool::unregister(int32_t b) {
    if (on_evict_) on_evict_(b);
    int32_t* link = &bucket_head_[hash_[b] & bucket_mask_];
    while (*link != b) {
        GDN_CHECK(*link >= 0, "block %d missing from its hash bucket", b);
        link = &next_in_bucket_[*link];
    }
    *link = next_in_bucket_[b];
    next_in_bucket_[b] = -1;
    ++gen_[b];  // even: unregistered; children registered under the old generation no longer match
    --n_registered_;
}

void BlockPool::lru_push(int32_t b) {
    lru_prev_[b] = lru_tail_;
    lru_next_[b] = -1;
    if (lru_tail_ >= 0)
        lru_next_[lru_tail_] = b;
    else
        lru_head_ = b;
    lru_tail_ = b;
    ++n_lru_;
}

void BlockPool::lru_remove(int32_t b) {
    if (lru_prev_[b] >= 0)
        lru_next_[lru_prev_[b]] = lru_next_[b];
    else
        lru_head_ = lru_next_[b];
    if (lru_next_[b] >= 0)
        lru_prev_[lru_next_[b]] = lru_prev_[b];
    else
        lru_tail_ = lru_prev_[b];
    lru_prev_[b] = lru_next_[b] = -1;
    --n_lru_;
}

int32_t BlockPool::allocate() {
    int32_t b;
    if (!free_.empty()) {
        b = free_.back();
        free_.pop_back();
    } else if (lru_head_ >= 0) {
        b = lru_head_;
        lru_remove(b);
        unregister(b);
        ++evictions_;
    } else {
        return -1;
    }
    ref_[b] = 1;
    return b;
}

void BlockPool::acquire(int32_t b) {
    GDN_CHECK(b >= 0 && b < n_ && registered(b), "acquiring block %d that is not cached", b);
    if (ref_[b]++ == 0) lru_remove(b);
}

void BlockPool::release(int32_t b) {
    GDN_CHECK(b >= 0 && b < n_ && ref_[b] > 0, "releasing block %d that is not in use", b);
    if (--ref_[b] > 0) return;
    if (registered(b))
        lru_push(b);
    else
        free_.push_back(b);
}

void BlockPool::clear_cache() {
    while (lru_head_ >= 0) {
        const int32_t b = lru_head_;
        lru_remove(b);
        unregister(b);
        free_.push_back(b);
    }
}

}  // namespace gdn
