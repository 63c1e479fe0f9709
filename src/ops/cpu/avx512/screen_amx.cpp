// AMX-INT8 tiles for the greedy argmax's int8 screen (screen_avx512.cpp): the integer sums of 4-8 rows
// (kScreenAmxRows up) against one panel of the int8 copy. vpdpbusd spends 2 x rows instructions per 128
// weight bytes, so from 4 rows on the screen is bound by the vector unit, not the stream (this Xeon VM,
// the 0.8B lm_head: 12.0 ms at 8 rows against 9.4 for one); tdpbusd does 16 x 16 x 64 per instruction.
//
// The screen's layout is already AMX's B operand: k-quad kk of a panel is 32 columns x 4 int8 = 128
// bytes, so columns 0-15 of 16 consecutive k-quads are a 16-row tile with a 128-byte stride (columns
// 16-31 the same, 64 bytes on); the rows' quads (xq + 128, unsigned) are the A operand as they are. The
// sums are exact integers (K x 255 x 127 < 2^31), so they equal vpdpbusd's bit for bit. The tile shapes
// are amx_tiles.h's (64-byte rows): C 0-1, A 4, B 6-7.
#include <immintrin.h>

#include <cstdint>

#include "ops/cpu/avx512/amx_tiles.h"
#include "ops/cpu/linear_kernels.h"

namespace gdn::cpu::avx512 {

void amx_screen_block(const uint32_t* xq, int64_t K4, int rows, const int8_t* panel, int64_t kq_end,
                      int32_t* c) {
    amx::configure(rows);
    _tile_zero(0);
    _tile_zero(1);
    for (int64_t kq = 0; kq < kq_end; kq += 16) {
        const int8_t* b = panel + kq * 128;
        const char* ahead = reinterpret_cast<const char*>(b) + amx::kStreamPrefetchBytes;
        for (int off = 0; off < 16 * 128; off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
        _tile_loadd(4, xq + kq, K4 * 4);
        _tile_loadd(6, b, 128);
        _tile_loadd(7, b + 64, 128);
        _tile_dpbusd(0, 4, 6);
        _tile_dpbusd(1, 4, 7);
    }
    _tile_stored(0, c, 128);
    _tile_stored(1, c + 16, 128);
}

}  // namespace gdn::cpu::avx512
