// Element-wise reduction kernels: dst[i] = op(a[i], b[i]) for every dtype and op.
//
// This header is included twice by kernels.cpp: once inside a region compiled with
// AVX2/F16C/FMA enabled (namespace kernels_avx2) and once without (kernels_generic);
// the data plane picks one at run time with __builtin_cpu_supports, so the extension
// never executes an instruction the CPU lacks. Half types (float16, bfloat16) are
// widened to float32 for each operation and rounded back (round to nearest even).

#ifndef KERNEL_NAMESPACE
#error "define KERNEL_NAMESPACE before including reduce_kernels.hpp"
#endif

namespace dataplane::KERNEL_NAMESPACE {

template <typename T> struct Sum {
  static inline T apply(T a, T b) { return a + b; }
#if KERNEL_HAS_F16C
  static inline __m256 vec(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
#endif
};
template <typename T> struct Prod {
  static inline T apply(T a, T b) { return a * b; }
#if KERNEL_HAS_F16C
  static inline __m256 vec(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
#endif
};
// min/max return a when the comparison is false (vminps/vmaxps semantics with operands swapped)
template <typename T> struct Min {
  static inline T apply(T a, T b) { return b < a ? b : a; }
#if KERNEL_HAS_F16C
  static inline __m256 vec(__m256 a, __m256 b) { return _mm256_min_ps(b, a); }
#endif
};
template <typename T> struct Max {
  static inline T apply(T a, T b) { return a < b ? b : a; }
#if KERNEL_HAS_F16C
  static inline __m256 vec(__m256 a, __m256 b) { return _mm256_max_ps(b, a); }
#endif
};

// Integer sum and product wrap around (two's complement), as numpy's do.
template <typename T, typename U> struct WrapSum {
  static inline T apply(T a, T b) { return (T)((U)a + (U)b); }
};
template <typename T, typename U> struct WrapProd {
  static inline T apply(T a, T b) { return (T)((U)a * (U)b); }
};

template <typename T, typename Op>
static void reduce_loop(T* __restrict__ dst, const T* a, const T* b, size_t n) {
  // dst may equal a or b (in-place reduction); no other overlap occurs.
  for (size_t i = 0; i < n; ++i) dst[i] = Op::apply(a[i], b[i]);
}

static inline float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

#if KERNEL_HAS_F16C
static inline __m256 bf16x8_load(const uint16_t* p) {
  __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
static inline void bf16x8_store(uint16_t* p, __m256 x) {
  __m256i u = _mm256_castps_si256(x);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);
  __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
  _mm_storeu_si128((__m128i*)p, _mm256_castsi256_si128(packed));
}
#endif

template <typename Op>
static void reduce_bf16(uint16_t* dst, const uint16_t* a, const uint16_t* b, size_t n) {
  size_t i = 0;
#if KERNEL_HAS_F16C
  for (; i + 8 <= n; i += 8) bf16x8_store(dst + i, Op::vec(bf16x8_load(a + i), bf16x8_load(b + i)));
#endif
  for (; i < n; ++i) dst[i] = f32_to_bf16(Op::apply(bf16_to_f32(a[i]), bf16_to_f32(b[i])));
}

template <typename Op>
static void reduce_f16(uint16_t* dst, const uint16_t* a, const uint16_t* b, size_t n) {
  size_t i = 0;
#if KERNEL_HAS_F16C
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(a + i)));
    __m256 y = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(b + i)));
    _mm_storeu_si128((__m128i*)(dst + i), _mm256_cvtps_ph(Op::vec(x, y), _MM_FROUND_TO_NEAREST_INT));
  }
#endif
  for (; i < n; ++i) dst[i] = float_to_half(Op::apply(half_to_float(a[i]), half_to_float(b[i])));
}

using SumI32 = WrapSum<int32_t, uint32_t>;
using ProdI32 = WrapProd<int32_t, uint32_t>;
using SumI64 = WrapSum<int64_t, uint64_t>;
using ProdI64 = WrapProd<int64_t, uint64_t>;
using SumU8 = WrapSum<uint8_t, uint32_t>;
using ProdU8 = WrapProd<uint8_t, uint32_t>;

// The dispatch table: one function per (dtype, op).
static void reduce(int dtype, int op, void* dst, const void* a, const void* b, size_t n) {
#define ARBORCC_OPS(T, SUM, PROD)                                                  \
  switch (op) {                                                                    \
    case OP_SUM: return reduce_loop<T, SUM>((T*)dst, (const T*)a, (const T*)b, n);  \
    case OP_PROD: return reduce_loop<T, PROD>((T*)dst, (const T*)a, (const T*)b, n); \
    case OP_MIN: return reduce_loop<T, Min<T>>((T*)dst, (const T*)a, (const T*)b, n); \
    case OP_MAX: return reduce_loop<T, Max<T>>((T*)dst, (const T*)a, (const T*)b, n); \
  }                                                                                \
  return;
  switch (dtype) {
    case DT_F32: ARBORCC_OPS(float, Sum<float>, Prod<float>)
    case DT_F64: ARBORCC_OPS(double, Sum<double>, Prod<double>)
    case DT_I32: ARBORCC_OPS(int32_t, SumI32, ProdI32)
    case DT_I64: ARBORCC_OPS(int64_t, SumI64, ProdI64)
    case DT_U8: ARBORCC_OPS(uint8_t, SumU8, ProdU8)
    case DT_F16:
    case DT_BF16: {
      auto* d = (uint16_t*)dst;
      auto* x = (const uint16_t*)a;
      auto* y = (const uint16_t*)b;
      bool half = dtype == DT_F16;
      switch (op) {
        case OP_SUM: return half ? reduce_f16<Sum<float>>(d, x, y, n) : reduce_bf16<Sum<float>>(d, x, y, n);
        case OP_PROD: return half ? reduce_f16<Prod<float>>(d, x, y, n) : reduce_bf16<Prod<float>>(d, x, y, n);
        case OP_MIN: return half ? reduce_f16<Min<float>>(d, x, y, n) : reduce_bf16<Min<float>>(d, x, y, n);
        case OP_MAX: return half ? reduce_f16<Max<float>>(d, x, y, n) : reduce_bf16<Max<float>>(d, x, y, n);
      }
    }
  }
#undef ARBORCC_OPS
}

}  // namespace dataplane::KERNEL_NAMESPACE
