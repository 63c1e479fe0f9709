// Shared helpers for the tests: data paths, temp folders, raw f32 files, deterministic random vectors.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/exec_context.h"
#include "core/thread_pool.h"
#include "engine/sampling.h"
#include "model/make_model.h"
#include "ops/dispatch.h"
#include "util/json_file.h"

namespace gdn::test {

// The sanitizer run executes the same tests on smaller sizes (it is ~10x slower; CI runs both builds):
// every assertion stays, only the number of requests / prompts / tokens shrinks.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

inline std::string source_dir() {
    return GDN_SOURCE_DIR;
}
inline std::string golden_dir(const std::string& family) {
    return source_dir() + "/tests/data/golden/" + family;
}
inline std::string demo_model_dir() {
    return source_dir() + "/models/demo";
}

// Greedy decoding of exactly n tokens (end-of-sequence ids do not stop it).
inline SamplingParams greedy(int n) {
    SamplingParams s;
    s.temperature = 0;
    s.max_tokens = n;
    s.ignore_eos = true;
    return s;
}

// Runs a test body on one worker thread. ctest runs two test processes at once on the 2-core CI machine,
// and two spinning 2-thread pools slowed each other 10-30x; tests of engine logic (results never depend
// on the thread count) take this, the kernel tests keep the default pool.
struct OneThread {
    OneThread() { set_global_threads(1); }
    ~OneThread() { set_global_threads(default_thread_count()); }
};

// The demo model's 20 chat prompts of the golden and speculative tests (also bench/demo_chat_prompts.txt).
inline const std::vector<std::string>& demo_chat_messages() {
    static const std::vector<std::string> m = {"Tell me a fortune.",
                                               "Define computer.",
                                               "What does love mean?",
                                               "Tell me a riddle.",
                                               "Give me a quote about science.",
                                               "Define cat.",
                                               "What does the Devil's Dictionary say about money?",
                                               "Hello!",
                                               "Who are you?",
                                               "Define happiness.",
                                               "Tell me a fortune about work.",
                                               "What does hack mean in hacker jargon?",
                                               "Give me a quote about time.",
                                               "Define river.",
                                               "What does freedom mean?",
                                               "Tell me a joke.",
                                               "Define music.",
                                               "Give me a quote about friendship.",
                                               "What does kernel mean in hacker jargon?",
                                               "Thanks, bye!"};
    return m;
}

inline std::vector<float> read_f32(const std::string& path) {
    std::ifstream f(path, std::ios::binary | std::ios::ate);
    EXPECT_TRUE(f.good()) << path;
    std::vector<float> v(static_cast<size_t>(f.tellg()) / 4);
    f.seekg(0);
    f.read(reinterpret_cast<char*>(v.data()), v.size() * 4);
    return v;
}

inline std::string read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary);
    f << bytes;
}

// Replaces the first `from` in dir/config.json by `to`; false when `from` is not there.
inline bool edit_config(const std::string& dir, const std::string& from, const std::string& to) {
    std::string cfg = read_bytes(dir + "/config.json");
    const size_t pos = cfg.find(from);
    if (pos == std::string::npos) return false;
    cfg.replace(pos, from.size(), to);
    write_bytes(dir + "/config.json", cfg);
    return true;
}

// A fresh temporary folder, removed by the destructor.
class TempDir {
  public:
    TempDir() {
        char tmpl[] = "/tmp/gdn_test_XXXXXX";
        const char* d = mkdtemp(tmpl);
        EXPECT_NE(d, nullptr);
        path_ = d ? d : "";
    }
    ~TempDir() {
        if (!path_.empty()) std::system(("rm -rf '" + path_ + "'").c_str());
    }
    const std::string& path() const { return path_; }

  private:
    std::string path_;
};

// Writes a random checkpoint of a preset into a temp folder (kept alive by the returned TempDir).
inline std::unique_ptr<TempDir> make_preset(const std::string& preset, uint64_t seed, int shards = 1,
                                            DType dtype = DType::BF16) {
    auto dir = std::make_unique<TempDir>();
    MakeModelOptions o;
    o.preset = preset;
    o.out_dir = dir->path();
    o.seed = seed;
    o.shards = shards;
    o.dtype = dtype;
    Status st = make_model(o);
    EXPECT_TRUE(st.is_ok()) << st.message();
    return dir;
}

// The context the tests run ops and models on: the process's pool (OneThread resizes it) and profiler.
inline ExecContext ctx() {
    return ExecContext::process();
}

// Marks the running test skipped (once per test), with the reason: the paths it compares are run, but a
// test that could not reach every kernel it is about must not read as a plain pass.
inline void skip_untested(const std::string& why) {
    static const ::testing::TestInfo* noted = nullptr;
    const ::testing::TestInfo* now = ::testing::UnitTest::GetInstance()->current_test_info();
    if (now == nullptr || now == noted) return;
    noted = now;
    [&] { GTEST_SKIP() << why; }();
}

// The fast ISA paths this CPU can run (each op test compares them with the reference). On a CPU without
// AVX-512 (or AVX2) the calling test compares what it can and is then reported skipped, naming the ISA
// whose kernels went untested.
inline std::vector<Isa> fast_isas() {
    std::vector<Isa> v;
    if (static_cast<int>(cpu_isa()) >= static_cast<int>(Isa::AVX2)) v.push_back(Isa::AVX2);
    if (cpu_isa() == Isa::AVX512) v.push_back(Isa::AVX512);
    if (cpu_isa() != Isa::AVX512)
        skip_untested(std::string("this CPU lacks ") + (v.empty() ? "AVX2 and AVX-512" : "AVX-512") +
                      ": those kernels were not compared with the reference");
    return v;
}

// The fast linear paths: each ISA, and on AVX-512 both the vector (vdpbf16ps) and, where the CPU has
// it, the AMX form of the bf16 kernels. use() selects one; restore_default_kernels() undoes it.
struct FastPath {
    Isa isa;
    bool amx;
    std::string name() const { return std::string(isa_name(isa)) + (amx ? "+amx" : ""); }
    void use() const {
        set_active_isa(isa);
        set_amx_bf16(amx);
    }
};
inline std::vector<FastPath> fast_paths() {
    std::vector<FastPath> v;
    for (Isa isa : fast_isas()) v.push_back({isa, false});
    if (cpu_isa() == Isa::AVX512 && cpu_has_amx_bf16()) v.push_back({Isa::AVX512, true});
    return v;
}
// The fast quantized paths: each ISA, and on AVX2 both the vpmaddubsw and, where the CPU has it, the
// AVX-VNNI build of the kernels.
struct QuantPath {
    Isa isa;
    bool avx_vnni;
    std::string name() const { return std::string(isa_name(isa)) + (avx_vnni ? "+avx-vnni" : ""); }
    void use() const {
        set_active_isa(isa);
        set_avx_vnni(avx_vnni);
    }
};
inline std::vector<QuantPath> quant_paths() {
    std::vector<QuantPath> v;
    for (Isa isa : fast_isas()) v.push_back({isa, false});
    if (cpu_has_avx_vnni()) v.push_back({Isa::AVX2, true});
    return v;
}
inline void restore_default_kernels() {
    set_active_isa(cpu_isa());
    set_avx_vnni(cpu_has_avx_vnni());
    set_amx_bf16(cpu_has_amx_bf16());
}

inline std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

inline float max_abs_diff(const float* a, const float* b, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; ++i) m = std::max(m, std::abs(a[i] - b[i]));
    return m;
}

}  // namespace gdn::test
