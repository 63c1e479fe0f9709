#include "structured/grammar_cache.h"

namespace gdn {

GrammarCache::Compiled GrammarCache::get(const std::string& key, const std::function<Compiled()>& compile) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (auto it = index_.find(key); it != index_.end()) {
            lru_.splice(lru_.begin(), lru_, it->second);
            hits_++;
            return it->second->grammar;
        }
        misses_++;
    }
    Compiled g = compile();
    if (!g) return g;
    const size_t bytes = (*g)->bytes() + key.size() + sizeof(Entry);
    if (bytes > budget_) return g;
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {  // compiled meanwhile by another request
        bytes_ -= it->second->bytes;
        lru_.erase(it->second);
        index_.erase(it);
    }
    evict_to(budget_ - bytes);
    lru_.push_front({key, *g, bytes});
    index_.emplace(lru_.front().key, lru_.begin());
    bytes_ += bytes;
    return g;
}

void GrammarCache::evict_to(size_t bytes) {
    while (bytes_ > bytes && !lru_.empty()) {
        bytes_ -= lru_.back().bytes;
        index_.erase(lru_.back().key);
        lru_.pop_back();
        evictions_++;
    }
}

GrammarCache::Stats GrammarCache::stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    Stats s;
    s.entries = lru_.size();
    s.bytes = bytes_;
    s.budget = budget_;
    for (const Entry& e : lru_) s.in_use += e.grammar.use_count() > 1;
    s.hits = hits_;
    s.misses = misses_;
    s.evictions = evictions_;
    return s;
}

}  // namespace gdn
