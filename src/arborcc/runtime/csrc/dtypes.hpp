// The codes Python passes for element types and reduction operators, and each type's size.
#pragma once

#include <cstddef>

namespace dataplane {

enum DType { DT_F32 = 0, DT_F64 = 1, DT_F16 = 2, DT_BF16 = 3, DT_I32 = 4, DT_I64 = 5, DT_U8 = 6 };
enum RedOp { OP_SUM = 0, OP_PROD = 1, OP_MIN = 2, OP_MAX = 3 };

inline constexpr size_t DTYPE_SIZE[] = {4, 8, 2, 2, 4, 8, 1};

}  // namespace dataplane
