// The IR's Python objects (arborcc.ir.model ThreadBlock, Step, Dependency) of a schedule,
// made in one pass, replicated for instances (arborcc.compiler.emit).
#pragma once

#include "pyints.hpp"
#include "sync.hpp"
#include "threadblocks.hpp"

namespace compiler {

struct IrClasses {  // the classes to make and their field names (dataclasses.fields order)
  py::object step, threadblock, dependency;
  py::tuple step_fields, threadblock_fields, dependency_fields;
  py::tuple ops;      // the Op of each instruction kind, then Op.NOP
  py::tuple buffers;  // the Buffer of each IR buffer number
};

// Per rank, its ThreadBlock objects: thread block id becomes id * n + i for instance i,
// channel c becomes c + C * i (C: channels of one instance) and every offset moves to
// instance i's copy, shifts[(rank * n + i) * 3 + IR buffer] chunks away (empty: none).
py::list build_threadblocks(const Schedule& s, const ThreadBlocks& a, int64_t instances, const Ints& shifts,
                            const IrClasses& cls);

}  // namespace compiler
