#include "cache/id_pool.h"

#include "core/log.h"

namespace gdn {

IdPool::IdPool(int32_t n, const char* what) : n_(n), what_(what), in_use_(n, 0) {
    free_.reserve(n);
    for (int32_t id = n - 1; id >= 0; --id) free_.push_back(id);  // id 0 handed out first
}

int32_t IdPool::allocate() {
    if (free_.empty()) return -1;
    const int32_t id = free_.back();
    free_.pop_back();
    in_use_[id] = 1;
    return id;
}

void IdPool::release(int32_t id) {
    GDN_CHECK(id >= 0 && id < n_ && in_use_[id], "releasing %s %d that is not in use", what_, id);
    in_use_[id] = 0;
    free_.push_back(id);
}

}  // namespace gdn
