// Kernel selection: which implementation each op runs is decided once at start-up, logged, and visible
// in the profiler. Nothing falls back quietly: a fallback taken at run time is counted and reported.
// Environment overrides:
// - GDN_ISA=avx512|avx2|ref: force an ISA (one the CPU lacks is an error, not a silent downgrade).
// - GDN_FORCE_REFERENCE=op,op|all: run the named ops on the scalar reference (for A/B runs).
// - GDN_DELTA_RULE=auto|recurrent|chunked: the prefill form of the fast delta rule (auto: the faster).
// - GDN_AMX=0|1: bf16 linears on AMX tiles where the CPU and OS allow it (default 1).
// - GDN_AVX_VNNI=0|1: AVX2's quantized linears on 256-bit vpdpbusd where the CPU has AVX-VNNI (default 1).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace gdn {

namespace cpu {
struct Bf16LinearKernels;
}

enum class Isa { REF, AVX2, AVX512 };
const char* isa_name(Isa isa);

enum class OpId : int {
    LINEAR,
    EMBEDDING,
    RMS_NORM,      // incl. the fused residual add
    QK_NORM_ROPE,  // per-head q/k RMSNorm + partial RoPE
    ATTENTION,
    CONV1D,    // GDN causal conv + SiLU
    GDN_PREP,  // split, q/k L2 norm and scale, gating (g, beta)
    GDN_RULE,  // the gated delta rule (decode step and prefill)
    GATED_NORM,
    SWIGLU,
    MOE,
    ARGMAX,
    COUNT
};
const char* op_name(OpId op);

// What the CPU supports (cpuid), independent of overrides.
Isa cpu_isa();
// The ISA op kernels run on: GDN_ISA if set (validated), else the best the CPU supports.
Isa active_isa();
// The implementation `op` uses: REF if forced by GDN_FORCE_REFERENCE, else active_isa().
Isa op_isa(OpId op);
// True if AVX-512 BF16 dot products (vdpbf16ps) are available for the active ISA.
bool has_bf16_dot();
// True if AVX-512 VNNI int8 dot products (vpdpbusd) are available for the active ISA.
bool has_int8_dot();
// True if the CPU has AVX-512 VNNI, whatever ISA is active (kernel tables whose AVX-512 rows need it).
bool cpu_has_avx512_vnni();
// True if the CPU has AVX-VNNI (256-bit vpdpbusd without AVX-512), whatever ISA is active.
bool cpu_has_avx_vnni();
// True if the AVX2 rows of the quantized kernels use AVX-VNNI: the CPU has it and GDN_AVX_VNNI is not 0.
bool has_avx_vnni();
// Turns the AVX-VNNI rows on or off (tests and A/B benchmarks; on only where the CPU has it). Returns
// the state.
bool set_avx_vnni(bool on);
// True if the CPU has AMX-BF16 tiles and the OS granted them to this process.
bool cpu_has_amx_bf16();
// True if the bf16 linear kernels run on AMX tiles: has_bf16_dot(), the CPU has AMX-BF16 and GDN_AMX is
// not 0. All of a process's bf16 products take one path (a row's sums must not depend on the batch: the
// engine's concurrent == alone and prefix-cache == recompute guarantees), so this is set at start-up.
bool has_amx_bf16();
// True if the greedy argmax's int8 screen runs 4+ rows on AMX-INT8 tiles: has_amx_bf16() (the
// same switch), has_int8_dot() and the CPU has AMX-INT8. Integer sums: the same values as vpdpbusd's.
bool has_amx_int8();
// Turns the AMX paths on or off (tests and A/B benchmarks; on only where the CPU allows). Returns the
// state of the bf16 one.
bool set_amx_bf16(bool on);
// The bf16 linear kernels every bf16 product runs (ops/cpu/linear_kernels.h): the AMX row where
// has_amx_bf16(), else the vdpbf16ps one. The one place that choice is made.
const cpu::Bf16LinearKernels& bf16_linear_kernels();

// Re-reads GDN_ISA / GDN_FORCE_REFERENCE (tests change them). Errors name the bad value.
Status configure_kernels_from_env();
// Programmatic overrides (tests and tools).
void set_active_isa(Isa isa);
void force_reference(OpId op, bool on);
void force_reference_all(bool on);

// The prefill form of the fast gated delta rule. CHUNKED runs every full 64-token chunk of a sequence in
// the chunked (WY) form and the rest recurrently; RECURRENT never; AUTO picks the faster form on this CPU
// kind (the recurrent one at every T so far, docs/perf.md).
enum class DeltaRuleForm { AUTO, RECURRENT, CHUNKED };
const char* delta_rule_form_name(DeltaRuleForm f);
DeltaRuleForm delta_rule_form();
void set_delta_rule_form(DeltaRuleForm f);
// Whether a prefill segment of T tokens (head dims Dk, Dv) runs its full chunks in the chunked form.
bool use_chunked_delta_rule(int64_t T, int64_t Dk, int64_t Dv);

// One line per op: "linear: avx512 (bf16 dot)" etc.
std::string kernel_selection_report();
void log_kernel_selection();

// Run-time fallbacks to a slower path: counted per op, the first one of each op logged as
// "fallback: <op> <what>", e.g. what = "runs on the reference kernel: the weight was not packed".
void count_fallback(OpId op, const char* what);
uint64_t fallback_count(OpId op);
std::string fallback_report();

}  // namespace gdn
