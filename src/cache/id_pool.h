// A fixed set of ids [0, n) handed out and taken back through a LIFO free list, with checks against
// releasing an id twice or one never handed out. KV blocks and GDN state slots are both such ids.
#pragma once

#include <cstdint>
#include <vector>

namespace gdn {

class IdPool {
  public:
    // what: the name of an id in error messages ("block", "state slot").
    IdPool(int32_t n, const char* what);
    int32_t size() const { return n_; }
    int32_t n_free() const { return static_cast<int32_t>(free_.size()); }
    // Returns an id (0 first on a fresh pool), or -1 if none is free.
    int32_t allocate();
    void release(int32_t id);

  private:
    int32_t n_;
    const char* what_;
    std::vector<int32_t> free_;    // LIFO free list
    std::vector<uint8_t> in_use_;  // double-release / foreign-id checks
};

}  // namespace gdn
