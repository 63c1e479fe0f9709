#include "core/exec_context.h"

#include "core/profiler.h"
#include "core/thread_pool.h"

namespace gdn {

ExecContext ExecContext::process() {
    return ExecContext(nullptr, &Profiler::get());
}

ThreadPool& ExecContext::process_pool() {
    return global_pool();
}

}  // namespace gdn
