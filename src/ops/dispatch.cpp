#include "ops/dispatch.h"

#include "ops/argmax_screen.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <sstream>

#include "core/log.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/linear_kernels.h"

namespace gdn {

namespace {

struct State {
    Isa isa = Isa::REF;
    std::array<bool, static_cast<int>(OpId::COUNT)> forced{};
    std::array<std::atomic<uint64_t>, static_cast<int>(OpId::COUNT)> fallbacks{};
    DeltaRuleForm delta_rule = DeltaRuleForm::AUTO;
    bool amx = false;       // the bf16 linear kernels use AMX tiles (GDN_AMX, set_amx_bf16)
    bool avx_vnni = false;  // the AVX2 quantized kernels use AVX-VNNI (GDN_AVX_VNNI, set_avx_vnni)
    bool configured = false;
};
State& state() {
    static State s;
    return s;
}
std::mutex g_mu;

bool os_saves_zmm() {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;  // OSXSAVE
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 0xe6) == 0xe6;  // XMM, YMM, opmask, ZMM state
}
bool os_saves_ymm() {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 0x6) == 0x6;
}

struct CpuFlags {
    bool avx2 = false, fma = false, f16c = false, avx_vnni = false;
    bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, avx512bf16 = false,
         avx512vnni = false;
    bool amx_bf16 = false;     // AMX-TILE + AMX-BF16, and the OS lets this process use the tile data
    bool amx_int8 = false;     // AMX-INT8 besides them (the same grant)
    bool amx_refused = false;  // the CPU has them but the OS did not grant the tile data
};

// Linux hands out the AMX tile state (XTILEDATA, 8 KB per thread) only to processes that ask for it.
bool os_grants_amx() {
#if defined(__linux__) && defined(SYS_arch_prctl)
    constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
}
CpuFlags detect() {
    CpuFlags f;
    unsigned a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        f.fma = c & (1u << 12);
        f.f16c = c & (1u << 29);
    }
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        f.avx2 = b & (1u << 5);
        f.avx512f = b & (1u << 16);
        f.avx512dq = b & (1u << 17);
        f.avx512bw = b & (1u << 30);
        f.avx512vl = b & (1u << 31);
        f.avx512vnni = c & (1u << 11);
        f.amx_bf16 = (d & (1u << 22)) && (d & (1u << 24));  // AMX-BF16, AMX-TILE
        f.amx_int8 = d & (1u << 25);                        // AMX-INT8
    }
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) {
        f.avx_vnni = a & (1u << 4);
        f.avx512bf16 = a & (1u << 5);
    }
    const bool ymm = os_saves_ymm(), zmm = os_saves_zmm();
    f.avx2 = f.avx2 && f.fma && f.f16c && ymm;
    f.avx512f = f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx2 && zmm;
    f.avx_vnni = f.avx_vnni && f.avx2;
    f.avx512bf16 = f.avx512bf16 && f.avx512f;
    f.avx512vnni = f.avx512vnni && f.avx512f;
    if (f.amx_bf16 && f.avx512bf16) {
        f.amx_refused = !os_grants_amx();
        f.amx_bf16 = !f.amx_refused;
    } else {
        f.amx_bf16 = false;
    }
    f.amx_int8 = f.amx_int8 && f.amx_bf16;  // has_amx_int8() adds the VNNI of the active ISA
    return f;
}
const CpuFlags& flags() {
    static const CpuFlags f = detect();
    return f;
}

void ensure_configured() {
    if (!state().configured) {
        Status st = configure_kernels_from_env();
        if (!st) {
            std::fprintf(stderr, "gdn: %s\n", st.message().c_str());
            std::exit(2);
        }
    }
}

}  // namespace

const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::REF:
            return "ref";
        case Isa::AVX2:
            return "avx2";
        case Isa::AVX512:
            return "avx512";
    }
    return "?";
}

const char* op_name(OpId op) {
    switch (op) {
        case OpId::LINEAR:
            return "linear";
        case OpId::EMBEDDING:
            return "embedding";
        case OpId::RMS_NORM:
            return "rms_norm";
        case OpId::QK_NORM_ROPE:
            return "qk_norm_rope";
        case OpId::ATTENTION:
            return "attention";
        case OpId::CONV1D:
            return "conv1d";
        case OpId::GDN_PREP:
            return "gdn_prep";
        case OpId::GDN_RULE:
            return "gdn_rule";
        case OpId::GATED_NORM:
            return "gated_norm";
        case OpId::SWIGLU:
            return "swiglu";
        case OpId::MOE:
            return "moe";
        case OpId::ARGMAX:
            return "argmax";
        case OpId::COUNT:
            break;
    }
    return "?";
}

Isa cpu_isa() {
    if (flags().avx512f) return Isa::AVX512;
    if (flags().avx2) return Isa::AVX2;
    return Isa::REF;
}

Status configure_kernels_from_env() {
    std::lock_guard<std::mutex> lock(g_mu);
    State& s = state();
    s.isa = cpu_isa();
    if (const char* e = std::getenv("GDN_ISA"); e && *e) {
        std::string v = e;
        Isa want;
        if (v == "avx512")
            want = Isa::AVX512;
        else if (v == "avx2")
            want = Isa::AVX2;
        else if (v == "ref")
            want = Isa::REF;
        else
            return Status::error("GDN_ISA='" + v + "' is not one of avx512, avx2, ref");
        if (static_cast<int>(want) > static_cast<int>(cpu_isa()))
            return Status::error("GDN_ISA=" + v + " but this CPU supports at most " + isa_name(cpu_isa()));
        s.isa = want;
    }
    s.forced.fill(false);
    if (const char* e = std::getenv("GDN_FORCE_REFERENCE"); e && *e) {
        std::stringstream ss(e);
        std::string name;
        while (std::getline(ss, name, ',')) {
            if (name.empty()) continue;
            if (name == "all") {
                s.forced.fill(true);
                continue;
            }
            bool found = false;
            for (int i = 0; i < static_cast<int>(OpId::COUNT); ++i)
                if (name == op_name(static_cast<OpId>(i))) {
                    s.forced[i] = true;
                    found = true;
                }
            if (!found) {
                std::string names;
                for (int i = 0; i < static_cast<int>(OpId::COUNT); ++i)
                    names += std::string(" ") + op_name(static_cast<OpId>(i));
                return Status::error("GDN_FORCE_REFERENCE names unknown op '" + name + "' (ops:" + names +
                                     ", all)");
            }
        }
    }
    s.amx = flags().amx_bf16;
    if (const char* e = std::getenv("GDN_AMX"); e && *e) {
        const std::string v = e;
        if (v == "0")
            s.amx = false;
        else if (v != "1")
            return Status::error("GDN_AMX='" + v + "' is not 0 or 1");
    }
    s.avx_vnni = flags().avx_vnni;
    if (const char* e = std::getenv("GDN_AVX_VNNI"); e && *e) {
        const std::string v = e;
        if (v == "0")
            s.avx_vnni = false;
        else if (v != "1")
            return Status::error("GDN_AVX_VNNI='" + v + "' is not 0 or 1");
    }
    s.delta_rule = DeltaRuleForm::AUTO;
    if (const char* e = std::getenv("GDN_DELTA_RULE"); e && *e) {
        const std::string v = e;
        if (v == "auto")
            s.delta_rule = DeltaRuleForm::AUTO;
        else if (v == "recurrent")
            s.delta_rule = DeltaRuleForm::RECURRENT;
        else if (v == "chunked")
            s.delta_rule = DeltaRuleForm::CHUNKED;
        else
            return Status::error("GDN_DELTA_RULE='" + v + "' is not one of auto, recurrent, chunked");
    }
    s.configured = true;
    return Status::ok();
}

const char* delta_rule_form_name(DeltaRuleForm f) {
    switch (f) {
        case DeltaRuleForm::AUTO:
            return "auto";
        case DeltaRuleForm::RECURRENT:
            return "recurrent";
        case DeltaRuleForm::CHUNKED:
            return "chunked";
    }
    return "?";
}
DeltaRuleForm delta_rule_form() {
    ensure_configured();
    return state().delta_rule;
}
void set_delta_rule_form(DeltaRuleForm f) {
    ensure_configured();
    state().delta_rule = f;
}

// AUTO's choice on this CPU kind: the recurrent form at every T. Measured (bench_ops BM_GdnMixer/T/form,
// 0.8B head shape, 2 threads, table in docs/perf.md): recurrent 1.13-1.4x faster from T = 64 to 16k.
// The chunked form's ~70k MAC per token-head at the ~0.7 of the FMA peak its small GEMMs reach cannot
// beat 3.5 vector ops per state element at ~0.85 of it; a matrix engine (AMX, tensor cores) changes that.
constexpr bool kAutoUsesChunked = false;

bool use_chunked_delta_rule(int64_t T, int64_t Dk, int64_t Dv) {
    const DeltaRuleForm f = delta_rule_form();
    if (f == DeltaRuleForm::RECURRENT || T < cpu::kGdnChunk) return false;
    if (Dk % 16 != 0 || Dv % 16 != 0) {
        // The chunk kernel's products run on whole vectors; these head dims stay on the recurrent form.
        if (f == DeltaRuleForm::CHUNKED)
            count_fallback(OpId::GDN_RULE, "runs recurrently: head dims not multiples of 16");
        return false;
    }
    return f == DeltaRuleForm::CHUNKED || kAutoUsesChunked;
}

Isa active_isa() {
    ensure_configured();
    return state().isa;
}

Isa op_isa(OpId op) {
    ensure_configured();
    return state().forced[static_cast<int>(op)] ? Isa::REF : state().isa;
}

bool has_bf16_dot() {
    return active_isa() == Isa::AVX512 && flags().avx512bf16;
}
bool has_int8_dot() {
    return active_isa() == Isa::AVX512 && flags().avx512vnni;
}
bool cpu_has_avx512_vnni() {
    return flags().avx512vnni;
}
bool cpu_has_avx_vnni() {
    return flags().avx_vnni;
}
bool has_avx_vnni() {
    ensure_configured();
    return state().avx_vnni;
}
bool set_avx_vnni(bool on) {
    ensure_configured();
    state().avx_vnni = on && flags().avx_vnni;
    return state().avx_vnni;
}
bool cpu_has_amx_bf16() {
    return flags().amx_bf16;
}
bool has_amx_bf16() {
    ensure_configured();
    return has_bf16_dot() && state().amx;
}
const cpu::Bf16LinearKernels& bf16_linear_kernels() {
    return has_amx_bf16() ? cpu::bf16_linear_kernels_amx() : cpu::bf16_linear_kernels_vdp();
}

bool has_amx_int8() {
    return has_amx_bf16() && has_int8_dot() && flags().amx_int8;
}
bool set_amx_bf16(bool on) {
    ensure_configured();
    state().amx = on && flags().amx_bf16;
    return state().amx;
}

void set_active_isa(Isa isa) {
    ensure_configured();
    GDN_CHECK(static_cast<int>(isa) <= static_cast<int>(cpu_isa()), "ISA %s not supported by this CPU",
              isa_name(isa));
    state().isa = isa;
}
void force_reference(OpId op, bool on) {
    ensure_configured();
    state().forced[static_cast<int>(op)] = on;
}
void force_reference_all(bool on) {
    ensure_configured();
    state().forced.fill(on);
}

std::string kernel_selection_report() {
    std::string s;
    for (int i = 0; i < static_cast<int>(OpId::COUNT); ++i) {
        const OpId op = static_cast<OpId>(i);
        const Isa isa = op_isa(op);
        if (op == OpId::EMBEDDING) {  // a row gather: there is no faster kernel to choose
            s += strprintf("  %-13s %s\n", op_name(op),
                           state().forced[i]
                               ? "ref (forced by GDN_FORCE_REFERENCE: rows from the checkpoint)"
                               : "row gather (a tied table from the packed lm_head, on huge pages)");
            continue;
        }
        s += strprintf("  %-13s %s", op_name(op), isa_name(isa));
        if (state().forced[i])
            s += " (forced by GDN_FORCE_REFERENCE)";
        else if (op == OpId::LINEAR && isa == Isa::AVX512)
            s += has_amx_bf16()    ? " (bf16: AMX tiles, tdpbf16ps)"
                 : !has_bf16_dot() ? " (f32 fma)"
                 : flags().amx_refused
                     ? " (bf16 dot: vdpbf16ps; the CPU has AMX but the OS did not grant its tile state)"
                 : flags().amx_bf16 ? " (bf16 dot: vdpbf16ps; AMX off by GDN_AMX=0)"
                                    : " (bf16 dot: vdpbf16ps)";
        else if (op == OpId::SWIGLU && isa == Isa::AVX512 && has_bf16_dot())
            s += has_amx_bf16() ? " (in the gate|up GEMM epilogue when I % 16 == 0)"
                                : " (in the gate|up GEMM epilogue when I % 16 == 0 and H <= 4096)";
        else if (op == OpId::GDN_RULE && isa != Isa::REF) {
            const DeltaRuleForm f = delta_rule_form();
            s += f == DeltaRuleForm::CHUNKED
                     ? " (prefill: full 64-token chunks in the chunked form, forced by GDN_DELTA_RULE)"
                 : f == DeltaRuleForm::RECURRENT
                     ? " (prefill: recurrent, one token per pass; forced by GDN_DELTA_RULE)"
                 : kAutoUsesChunked
                     ? " (prefill: full 64-token chunks in the chunked form, by measurement)"
                     : " (prefill: recurrent, one token per pass; the chunked form measured slower here)";
        } else if (op == OpId::MOE && isa != Isa::REF)
            s += " (scalar routing; experts grouped, on the linear kernels)";
        else if (op == OpId::ATTENTION && isa == Isa::AVX512 && has_bf16_dot())
            s += has_amx_bf16()
                     ? " (bf16-mode prefill rows past 256 keys: AMX tiles, Q/K/V/P in bf16)"
                     : " (bf16-mode prefill rows past 256 keys: vdpbf16ps flash tiles, Q/K/V/P in bf16)";
        else if (op == OpId::ARGMAX && argmax_screen_available())
            s += std::string(" (greedy lm_head: ") + argmax_screen_kernel() + ")";
        s += "\n";
    }
    return s;
}

void log_kernel_selection() {
    GDN_LOG_INFO("kernels (cpu supports %s, running %s):\n%s", isa_name(cpu_isa()), isa_name(active_isa()),
                 kernel_selection_report().c_str());
}

void count_fallback(OpId op, const char* what) {
    if (state().fallbacks[static_cast<int>(op)]++ == 0) GDN_LOG_WARN("fallback: %s %s", op_name(op), what);
}

uint64_t fallback_count(OpId op) {
    return state().fallbacks[static_cast<int>(op)].load();
}

std::string fallback_report() {
    std::string s;
    for (int i = 0; i < static_cast<int>(OpId::COUNT); ++i)
        if (uint64_t n = state().fallbacks[i].load())
            s += strprintf("%s: %llu fallbacks; ", op_name(static_cast<OpId>(i)), (unsigned long long)n);
    return s;
}

}  // namespace gdn
