// The element-wise kernels (kernels.hpp) and the run-time choice between their AVX2 and
// generic versions: reduce_kernels.hpp compiled twice, the streaming copy, division.

#include "kernels.hpp"

#include <immintrin.h>

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
// then finds it in memory, not in the cache.
__attribute__((target("avx2"))) static void stream_copy_avx2(char* dst, const char* src, size_t n) {
  size_t head = (32 - ((uintptr_t)dst & 31)) & 31;
  if (head > n) head = n;
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    __m256i a = _mm256_loadu_si256((const __m256i*)(src + i));
    __m256i b = _mm256_loadu_si256((const __m256i*)(src + i + 32));
    __m256i c = _mm256_loadu_si256((const __m256i*)(src + i + 64));
    __m256i d = _mm256_loadu_si256((const __m256i*)(src + i + 96));
    _mm256_stream_si256((__m256i*)(dst + i), a);
    _mm256_stream_si256((__m256i*)(dst + i + 32), b);
    _mm256_stream_si256((__m256i*)(dst + i + 64), c);
    _mm256_stream_si256((__m256i*)(dst + i + 96), d);
  }
  std::memcpy(dst + i, src + i, n - i);
  _mm_sfence();  // streaming stores are weakly ordered: complete them before anyone is told
}

void copy_bytes(char* dst, const char* src, size_t n, bool streaming) {
  if (dst == src || n == 0) return;
  if (streaming && HAVE_AVX2 && n >= 4096) {
    stream_copy_avx2(dst, src, n);
  } else {
    std::memcpy(dst, src, n);
  }
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
