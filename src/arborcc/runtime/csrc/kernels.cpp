// The element-wise kernels (kernels.hpp) and the run-time choice between their AVX2 and
// generic versions: reduce_kernels.hpp compiled twice, the streaming copy, division.

#include "kernels.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "dtypes.hpp"
#include "errors.hpp"
#include "half.hpp"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#define KERNEL_NAMESPACE kernels_avx2
#define KERNEL_HAS_F16C 1
#include "reduce_kernels.hpp"
#undef KERNEL_NAMESPACE
#undef KERNEL_HAS_F16C
#pragma GCC pop_options

#define KERNEL_NAMESPACE kernels_generic
#define KERNEL_HAS_F16C 0
#include "reduce_kernels.hpp"
#undef KERNEL_NAMESPACE
#undef KERNEL_HAS_F16C

namespace dataplane {

static bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma");
}

const bool HAVE_AVX2 = cpu_has_avx2();
const ReduceFn reduce_fn = HAVE_AVX2 ? kernels_avx2::reduce : kernels_generic::reduce;

// Copy with non-temporal stores (AVX2 streaming stores, which write whole cache lines to
// memory without first reading the destination into the cache: a plain store to a line
// not in the cache reads it first, so a large copy moves 3 bytes per byte copied, this
// one 2). Only for buffers larger than the caches: the next reader of the destination
// then finds it in memory, not in the cache. Every 128 bytes loaded go to each of the
// destinations, which share their alignment modulo 32.
__attribute__((target("avx2"))) static void stream_copy_avx2(char* const* dsts, int ndst, const char* src, size_t n) {
  size_t head = (32 - ((uintptr_t)dsts[0] & 31)) & 31;
  if (head > n) head = n;
  for (int k = 0; k < ndst; ++k) std::memcpy(dsts[k], src, head);
  src += head;
  n -= head;
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    __m256i a = _mm256_loadu_si256((const __m256i*)(src + i));
    __m256i b = _mm256_loadu_si256((const __m256i*)(src + i + 32));
    __m256i c = _mm256_loadu_si256((const __m256i*)(src + i + 64));
    __m256i d = _mm256_loadu_si256((const __m256i*)(src + i + 96));
    for (int k = 0; k < ndst; ++k) {
      char* out = dsts[k] + head + i;
      _mm256_stream_si256((__m256i*)out, a);
      _mm256_stream_si256((__m256i*)(out + 32), b);
      _mm256_stream_si256((__m256i*)(out + 64), c);
      _mm256_stream_si256((__m256i*)(out + 96), d);
    }
  }
  for (int k = 0; k < ndst; ++k) std::memcpy(dsts[k] + head + i, src + i, n - i);
  _mm_sfence();
}

void copy_bytes(char* dst, const char* src, size_t n, bool streaming) {
  if (dst == src || n == 0) return;
  if (streaming && HAVE_AVX2 && n >= 4096) {
    stream_copy_avx2(&dst, 1, src, n);
  } else {
    std::memcpy(dst, src, n);
  }
}

void copy_to_many(char* const* dsts, int ndst, const char* src, size_t n, bool streaming) {
  if (ndst <= 0 || n == 0) return;
  if (ndst == 1) return copy_bytes(dsts[0], src, n, streaming);
  bool aligned_alike = true;
  for (int k = 1; k < ndst; ++k)
    aligned_alike = aligned_alike && ((uintptr_t)dsts[k] & 31) == ((uintptr_t)dsts[0] & 31);
  if (streaming && HAVE_AVX2 && n >= 4096 && aligned_alike) return stream_copy_avx2(dsts, ndst, src, n);
  constexpr size_t PIECE = 32 << 10;  // the second and later reads of a piece hit the L1
  for (size_t o = 0; o < n; o += PIECE)
    for (int k = 0; k < ndst; ++k) copy_bytes(dsts[k] + o, src + o, std::min(PIECE, n - o), streaming);
}

void divide_array(uint64_t addr, size_t n, int dtype, double divisor) {
  switch (dtype) {
    case DT_F32: {
      float* p = (float*)(uintptr_t)addr;
      for (size_t i = 0; i < n; ++i) p[i] = (float)(p[i] / divisor);
      return;
    }
    case DT_F64: {
      double* p = (double*)(uintptr_t)addr;
      for (size_t i = 0; i < n; ++i) p[i] /= divisor;
      return;
    }
    case DT_F16: {
      uint16_t* p = (uint16_t*)(uintptr_t)addr;
      for (size_t i = 0; i < n; ++i) p[i] = float_to_half((float)(half_to_float(p[i]) / divisor));
      return;
    }
    case DT_BF16: {
      uint16_t* p = (uint16_t*)(uintptr_t)addr;
      for (size_t i = 0; i < n; ++i) p[i] = kernels_generic::f32_to_bf16((float)(kernels_generic::bf16_to_f32(p[i]) / divisor));
      return;
    }
  }
  throw CommError("avg is defined for floating-point types only");
}

}  // namespace dataplane
