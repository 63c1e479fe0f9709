// What a model forward runs with besides the weights and the caches: the execution context (thread pool,
// profiler) and the buffers it reuses from call to call (so a warm decode step allocates nothing). Owned
// by whoever runs forwards, not by the Model: an engine holds one; a standalone sequence (SequenceState)
// holds the one its standalone forwards use (on the model's own context). Two workspaces over one Model,
// each on its own context, run independently (two engines in one process, a target and a draft); one
// workspace serves one forward at a time. Its buffers are the forward's business (model/forward.cpp).
#pragma once

#include <memory>

#include "core/exec_context.h"

namespace gdn {

struct ForwardWorkspace;
struct ForwardWorkspaceDeleter {
    void operator()(ForwardWorkspace* ws) const;
};
using ForwardWorkspacePtr = std::unique_ptr<ForwardWorkspace, ForwardWorkspaceDeleter>;
ForwardWorkspacePtr new_forward_workspace(const ExecContext& ctx);

}  // namespace gdn
