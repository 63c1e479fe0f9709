// Subcommands of the gdn CLI. Each takes the arguments after its name and returns an exit code.
#pragma once

namespace gdn {

class Args;
int cmd_bench_serve(Args& args);   // gdn bench serving mode (cmd_bench_serve.cpp)
int cmd_bench_prefix(Args& args);  // gdn bench --multi-turn / --shared-prefix (cmd_bench_prefix.cpp)

int cmd_run(int argc, char** argv);
int cmd_make_model(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_detokenize(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_profile(int argc, char** argv);
int cmd_perplexity(int argc, char** argv);
int cmd_quantize(int argc, char** argv);
int cmd_serve(int argc, char** argv);

}  // namespace gdn
