// Compiled grammars by what they were compiled from. Agents send the same schema or tool list with every
// request, and a schema's grammar can take tens of MiB and a good part of a second to build: the server
// compiles each one once and keeps it while it is used, least recently used first out, within a memory
// budget (the grammars' Grammar::bytes() plus their keys). A grammar that is evicted while requests still
// hold it lives on until the last of them ends; /metrics shows the cache (stats()).
//
// Thread-safe: the server's request workers share one. Two requests missing the same key at once both
// compile it (the compile runs outside the lock); the second result is the one kept. A failed compile is
// not kept (it is cheap to refuse again: the grammar budget stops it early).
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/status.h"
#include "structured/grammar.h"

namespace gdn {

class GrammarCache {
  public:
    using Compiled = Result<std::shared_ptr<const Grammar>>;
    // budget_bytes 0: nothing is kept (every request compiles its grammar).
    explicit GrammarCache(size_t budget_bytes) : budget_(budget_bytes) {}

    // The grammar for `key` (the kind of constraint and its canonical text: two keys are equal exactly
    // when their grammars are): the cached one, or compile()'s result, kept when it fits the budget.
    Compiled get(const std::string& key, const std::function<Compiled()>& compile);

    struct Stats {
        size_t entries = 0, bytes = 0, budget = 0;
        size_t in_use = 0;  // entries that requests hold right now
        uint64_t hits = 0, misses = 0, evictions = 0;
    };
    Stats stats() const;

  private:
    struct Entry {
        std::string key;
        std::shared_ptr<const Grammar> grammar;
        size_t bytes;
    };
    void evict_to(size_t bytes);  // under mu_

    const size_t budget_;
    mutable std::mutex mu_;
    std::list<Entry> lru_;                                                    // most recently used first
    std::unordered_map<std::string_view, std::list<Entry>::iterator> index_;  // views of Entry::key
    size_t bytes_ = 0;
    uint64_t hits_ = 0, misses_ = 0, evictions_ = 0;
};

}  // namespace gdn
