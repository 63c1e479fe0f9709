#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/dtype.h"

using namespace gdn;

TEST(DType, Bf16RoundToNearestEven) {
    EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
    // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
    EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
    // 1 + 3*2^-8 is halfway between 1.0078125 (odd) and 1.015625 (even): rounds up.
    EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
    EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(-2.5f)), -2.5f);
    EXPECT_TRUE(std::isinf(bf16_to_f32(f32_to_bf16(3.4e38f))));  // rounds past the largest bf16
}

TEST(DType, F16RoundTripAllValues) {
    for (uint32_t h = 0; h < 0x10000; ++h) {
        float f = f16_to_f32(static_cast<uint16_t>(h));
        if (std::isnan(f)) continue;
        EXPECT_EQ(f32_to_f16(f), h) << std::hex << h;
    }
}

TEST(DType, F16RoundToNearestEven) {
    EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
    EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie -> even
    EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie -> even (up)
    EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);                          // overflow -> inf
    EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
    EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
    EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even (0)
    EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);
    EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
}
