// The bf16 prefill attention (bf16 mode, AVX-512 with BF16; rows past 256 keys, ops/layers.cpp). Per
// sequence, each KV head's K and V are packed once into bf16 operand layouts, then blocks of up to 32
// query rows (tokens x the KV head's query heads) run on one of two engines:
//   AMX (cpu/avx512/attention_amx.cpp, where dispatch.h has_amx_bf16()): S = Q K^T and O = P V as two
//       tile GEMMs over the block's keys, an exact softmax between them;
//   vdpbf16ps (cpu/avx512/attention_dot.cpp, every other CPU with AVX-512 BF16): flash-style, keys in
//       fixed 64-key chunks with an online softmax, S, P and the f32 output block staying in L1.
// Both: Q, K, V and the probabilities in bf16, every product sum and the softmax in f32, and a row's
// result depends only on its own q, keys and causal limit (never on the block or chunk it is in).
#pragma once

#include <cstdint>

#include "ops/cpu/kernels.h"

namespace gdn::cpu::avx512 {

// Whether heads of size D with `group` query heads per KV head take the bf16 path.
bool attention_bf16_supported(int64_t D, int64_t group);

// Keys per chunk of the vdpbf16ps engine's packed K (its online-softmax step takes two); the AMX engine
// packs K as one chunk of all nk keys.
constexpr int64_t kDotKeyChunk = 64;

// Where key j's dim pair i lies in a packed K of nk keys in chunks of key_chunk keys (a multiple of 32):
// chunk c holds keys [c key_chunk, c key_chunk + w) as [D/2][w] words (w = key_chunk, or what is left of
// nk at the last chunk), the chunks one after another. Chunks keep a chunk's 64-key rows 256 B apart:
// one [D/2][nk] array puts them nk * 4 B apart, on the same few L1 sets at every nk a multiple of 1024.
inline int64_t packed_key_chunk_start(int64_t j, int64_t D2, int64_t key_chunk) {
    return j / key_chunk * key_chunk * D2;
}
inline int64_t packed_key_chunk_width(int64_t j, int64_t nk, int64_t key_chunk) {
    const int64_t c0 = j / key_chunk * key_chunk;
    return nk - c0 < key_chunk ? nk - c0 : key_chunk;
}

// Packs keys [j0, j1) (j0, j1 even; keys >= n_keys become zeros) of the KV head at column offset hoff:
//   kt: key j's dims as bf16 pairs (2i, 2i + 1), in chunks of key_chunk keys (above)
//   vp [nk/2][D] uint32: row jp, column d = (v_{2jp}[d], v_{2jp+1}[d]) as a bf16 pair
// nk: the keys the buffers hold (a multiple of 32, >= every block's keys). key_chunk: kDotKeyChunk for
// the vdpbf16ps engine, nk for AMX (kt is then one [D/2][nk] array).
void attention_bf16_pack(const KvRows& kv, int64_t hoff, int64_t D, int64_t n_keys, int64_t j0, int64_t j1,
                         uint32_t* kt, uint32_t* vp, int64_t nk, int64_t key_chunk);

// Query tokens [tb, tb + ntok) of one sequence (token t of head h of the group at q + t ldq + h D; gate
// alike, or null), ntok * group <= 32, causal over keys [0, n_past + t + 1): out + t ldo + h D gets the
// sigmoid-gated attention output. The AMX engine, then the vdpbf16ps one.
void attention_amx_block(const float* q, const float* gate, int64_t ldq, int64_t group, int64_t D,
                         int64_t n_past, int64_t tb, int64_t ntok, const uint32_t* kt, const uint32_t* vp,
                         int64_t nk, float scale, float* out, int64_t ldo);
void attention_dot_block(const float* q, const float* gate, int64_t ldq, int64_t group, int64_t D,
                         int64_t n_past, int64_t tb, int64_t ntok, const uint32_t* kt, const uint32_t* vp,
                         int64_t nk, float scale, float* out, int64_t ldo);

}  // namespace gdn::cpu::avx512
