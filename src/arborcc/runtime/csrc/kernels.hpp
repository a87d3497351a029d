// The element-wise kernels the data plane calls: reduction, copy with or without streaming
// stores, division (an average's last step). Each has an AVX2 and a generic version; the
// extension picks one at run time from the CPU's features (kernels.cpp), so it never
// executes an instruction the CPU lacks.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dataplane {

// The CPU has AVX2, F16C and FMA (the vector kernels run).
extern const bool HAVE_AVX2;

// dst[i] = op(a[i], b[i]) for n elements of dtype (dtypes.hpp's codes); dst may equal a or b.
using ReduceFn = void (*)(int dtype, int op, void* dst, const void* a, const void* b, size_t n);
extern const ReduceFn reduce_fn;

// dst = src (n bytes, not overlapping), with streaming stores when `streaming` and the CPU has AVX2.
void copy_bytes(char* dst, const char* src, size_t n, bool streaming);

// dsts[k] = src for k < ndst (n bytes each, none overlapping src): src is read once per
// 32 KB piece whatever the number of destinations (with streaming stores and AVX2, and
// destinations equally aligned, once in all: each 128 bytes loaded go to every destination).
void copy_to_many(char* const* dsts, int ndst, const char* src, size_t n, bool streaming);

// dst[i] /= divisor for a floating-point array (the last step of an average).
void divide_array(uint64_t addr, size_t n, int dtype, double divisor);

}  // namespace dataplane
