// IEEE half precision (float16) to and from float32, in software (round to nearest even);
// bfloat16's conversions are in reduce_kernels.hpp.
#pragma once

#include <cstdint>
#include <cstring>

namespace dataplane {

inline float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do { ++e; mant <<= 1; } while (!(mant & 0x400));
      u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t float_to_half(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000;
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return (uint16_t)(sign | 0x7e00);  // NaN
  if (absu >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);  // overflow to inf (after rounding)
  if (absu < 0x38800000u) {                                   // subnormal half or zero
    if (absu < 0x33000000u) return (uint16_t)sign;
    uint32_t e = absu >> 23, mant = (absu & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e;  // 14 + (113 - e)
    uint32_t r = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return (uint16_t)(sign | r);
  }
  uint32_t r = absu - 0x38000000u;  // rebias exponent
  uint32_t lsb = (r >> 13) & 1;
  r += 0xfff + lsb;
  return (uint16_t)(sign | (r >> 13));
}

}  // namespace dataplane
