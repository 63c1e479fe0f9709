// Software prefetch for weight streams: one-row ones (decode GEMVs, the greedy lm_head screen) on AVX2
// CPUs, and the AVX-512 kernels' decode batches (bf16, int8, int4-sym, the greedy screen's 2-8 rows;
// below).
// Those kernels spend several vector ops per 32 weight bytes, and the ops of the loop fill the core's
// out-of-order window, so that the hardware prefetchers alone fell well short of a plain read's
// bandwidth (docs/perf.md, "thirteenth session"). Each loop step that reads 128 bytes asks for the two
// lines kStreamAheadBytes further on. Multi-row tiles there (prefill, verify) read from cache or are
// bound by their vector ops, and are slower with it.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace gdn::cpu {

// 1 KB: the best of the distances tried for the one-row streams (docs/perf.md, behind the constants:
// ops/cpu/stream_ahead.h).
constexpr int64_t kStreamAheadBytes = 1024;

// The two lines of the 128 bytes `ahead` bytes past p, into L1.
inline void prefetch_128_ahead(const void* p, int64_t ahead) {
    const char* c = static_cast<const char*>(p) + ahead;
    _mm_prefetch(c, _MM_HINT_T0);
    _mm_prefetch(c + 64, _MM_HINT_T0);
}
inline void stream_ahead_128(const void* p) {
    prefetch_128_ahead(p, kStreamAheadBytes);
}

// Decode batches on AVX-512 (2-12 rows over each weight panel at once; not one row): every 128 bytes of
// a bf16 panel cost 2 x rows vdpbf16ps (of an int8 one 2 x rows vpdpbusd and its scales), so at 4-8
// rows the loop's compute is about the memory's time for its bytes, and with the hardware prefetchers
// alone the two did not overlap -- the step took their sum. 2 to 16 KB ahead are alike (docs/perf.md,
// behind the constants: ops/cpu/stream_ahead.h).
constexpr int64_t kStreamAheadBatchBytes = 4096;
inline void stream_ahead_batch_128(const void* p) {
    prefetch_128_ahead(p, kStreamAheadBatchBytes);
}

// The AVX-512 quantized kernels' one-row tiles on CPUs whose DRAM is far (quant_tiles_avx512.h
// streams_far): docs/perf.md, behind the constants, and its thirty-third session.
constexpr int64_t kStreamAheadFarBytes = 8192;

}  // namespace gdn::cpu
