// Software prefetch for weight streams: one-row ones (decode GEMVs, the greedy lm_head screen) on AVX2
// CPUs, and the AVX-512 kernels' decode batches (bf16, int8, int4-sym, the greedy screen's 2-8 rows;
// below).
// Those kernels spend several vector ops per 32 weight bytes, and the ops of the loop fill the core's
// out-of-order window so that the hardware prefetchers alone kept ~0.75 of a plain read's bandwidth
// on the Zen 3 AVX2 VM (docs/perf.md, "thirteenth session"). Each loop step that reads 128 bytes asks
// for the two lines kStreamAheadBytes further on. Multi-row tiles there (prefill, verify) read from
// cache or are bound by their vector ops, and measured slower with it.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace gdn::cpu {

// 1 KB: int8 GEMV (131072 x 1024, 2 threads) 21.2-21.6 GB/s against 19.5-21.0 at 2 KB and 17.6-18.7
// with none; bf16 decode of the 0.8B shape 0.80-0.85 of its roofline against 0.77-0.80 at 512 B.
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
// alone the two did not overlap -- the step took their sum. Zen 5, 2 threads, the 0.8B shape in bf16,
// `gdn bench --concurrency 2,4,8` (ABBA): steps 29-33 / 38 / 42-45 ms without, 25-27 / 27-29 / 31-36
// with; 2, 4, 8 and 16 KB measured alike.
constexpr int64_t kStreamAheadBatchBytes = 4096;
inline void stream_ahead_batch_128(const void* p) {
    prefetch_128_ahead(p, kStreamAheadBatchBytes);
}

// The AVX-512 quantized kernels' one-row tiles on CPUs whose DRAM is far (quant_tiles_avx512.h
// streams_far). The AMX VM (Xeon, 2 threads), c = 1 decode of the 0.8B shape, alternated: int4 (int4-k /
// int6-k) 34.2-34.8 t/s at 1 KB, 41.0-41.6 at 8 KB, 41.1-42.3 at 16 KB; against the kernels without it
// (int8, int4-sym: none; int4: 1 KB) +15-25% for every format (docs/perf.md, thirty-third session).
constexpr int64_t kStreamAheadFarBytes = 8192;

}  // namespace gdn::cpu
