// The Python module arborcc.runtime.native (pybind11): the Communicator class, the
// element-wise kernels on raw addresses, and the helpers the Python side needs (buffer
// addresses, unlinking a shared-memory name).

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <sys/mman.h>

#include "communicator.hpp"
#include "errors.hpp"
#include "kernels.hpp"
#include "step_codes.hpp"

namespace py = pybind11;

namespace dataplane {

static void copy_array(uint64_t dst, uint64_t src, size_t n, bool streaming) {
  copy_bytes((char*)(uintptr_t)dst, (const char*)(uintptr_t)src, n, streaming);
}

static void reduce_arrays(uint64_t dst, uint64_t a, uint64_t b, size_t n, int dtype, int op) {
  reduce_fn(dtype, op, (void*)(uintptr_t)dst, (const void*)(uintptr_t)a, (const void*)(uintptr_t)b, n);
}

// (address, bytes) of a C-contiguous writable buffer (numpy arrays): one call, no copies
static std::pair<uint64_t, int64_t> buffer_address(py::handle obj) {
  Py_buffer view;
  if (PyObject_GetBuffer(obj.ptr(), &view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) != 0) throw py::error_already_set();
  std::pair<uint64_t, int64_t> r{(uint64_t)(uintptr_t)view.buf, (int64_t)view.len};
  PyBuffer_Release(&view);
  return r;
}

}  // namespace dataplane

PYBIND11_MODULE(native, m) {
  using namespace dataplane;
  m.doc() = "arborcc's shared-memory data plane (C++): the IR interpreter over shared-memory FIFOs";
  py::register_exception<CommError>(m, "NativeCommError");
  m.attr("HAVE_AVX2") = HAVE_AVX2;
  m.attr("MAX_RANKS") = MAX_RANKS;
  m.attr("MAX_SLOTS") = MAX_SLOTS;
  m.attr("CALL_COLLECTIVES") = std::vector<std::string>(std::begin(CALL_COLLECTIVES), std::end(CALL_COLLECTIVES));
  m.attr("CALL_DTYPES") = std::vector<std::string>(std::begin(CALL_DTYPES), std::end(CALL_DTYPES));
  m.attr("CALL_OPS") = std::vector<std::string>(std::begin(CALL_OPS), std::end(CALL_OPS));
  // the staged executors by the name Plan.staged_kind gives them (prepare_staged's `kind`)
  m.attr("STAGED_KINDS") = py::dict(py::arg("owner") = (int)Communicator::STAGED_OWNER,
                                    py::arg("reducescatter") = (int)Communicator::STAGED_SCATTER,
                                    py::arg("oneshot") = (int)Communicator::STAGED_ONESHOT,
                                    py::arg("allgather") = (int)Communicator::STAGED_GATHER);
  m.attr("STEP_CODES") = std::vector<std::string>(std::begin(step::STEP_NAMES), std::end(step::STEP_NAMES));
  m.attr("STEP_FLAGS") = std::vector<unsigned>(std::begin(step::FLAGS), std::end(step::FLAGS));
  m.attr("CALL_MODES") = std::vector<std::string>(std::begin(CALL_MODES), std::end(CALL_MODES));
  m.def("buffer_address", &buffer_address, "address and size in bytes of a contiguous writable buffer");
  m.def("unlink", [](const std::string& name) { return shm_unlink(name.c_str()) == 0; });
  m.def("space_message", &space_message, "why memory of /dev/shm could not be reserved (needed bytes, for what, remedy)");
  m.def("divide", &divide_array, "divide a floating-point array in place (address, count, dtype code, divisor)");
  m.def("copy", &copy_array, "copy n bytes between addresses that do not overlap, with streaming stores if asked "
        "(and the CPU has AVX2)");
  m.def("copy_to_many", [](const std::vector<uint64_t>& dsts, uint64_t src, size_t n, bool streaming) {
    std::vector<char*> to;
    for (uint64_t d : dsts) to.push_back((char*)(uintptr_t)d);
    copy_to_many(to.data(), (int)to.size(), (const char*)(uintptr_t)src, n, streaming);
  }, "copy n bytes to every destination address, each source byte read once (streaming stores if asked)");
  m.def("reduce", &reduce_arrays, "dst = op(a, b) element-wise (addresses, element count, dtype and op codes)");
  py::class_<Communicator>(m, "Communicator")
      .def(py::init<const std::string&, int, bool, int, int, int, uint64_t>(), py::arg("name"), py::arg("rank"),
           py::arg("create"), py::arg("nranks") = 0, py::arg("channels") = 0, py::arg("slots") = 0,
           py::arg("slot_bytes") = 0)
      .def_property_readonly("rank", &Communicator::rank)
      .def_property_readonly("nranks", &Communicator::nranks)
      .def_property_readonly("cma", &Communicator::cma)
      .def_property_readonly("window_calls", &Communicator::window_calls)
      .def_property_readonly("staged_calls", &Communicator::staged_calls)
      .def_property_readonly("staged_shared_calls", &Communicator::staged_shared_calls)
      .def("prepare_staged", &Communicator::prepare_staged, py::arg("count"), py::arg("dtype"), py::arg("op"),
           py::arg("slot_bytes"), py::arg("timeout"), py::arg("kind"), py::arg("what"), py::arg("call_count"))
      .def("wait_attached", &Communicator::wait_attached, py::call_guard<py::gil_scoped_release>())
      .def("abort", &Communicator::abort)
      .def("abort_message", &Communicator::abort_message)
      .def("register_program", &Communicator::register_program)
      .def("prepare", &Communicator::prepare)
      .def("set_waiting", &Communicator::set_waiting)
      .def("run_prepared", &Communicator::run_prepared, py::call_guard<py::gil_scoped_release>())
      .def("publish", &Communicator::publish)
      .def("wait_published", &Communicator::wait_published, py::call_guard<py::gil_scoped_release>())
      .def("barrier", &Communicator::barrier, py::call_guard<py::gil_scoped_release>())
      .def("map_window", &Communicator::map_window, py::call_guard<py::gil_scoped_release>())
      .def("unmap_window", &Communicator::unmap_window)
      .def("window_collective", &Communicator::window_collective, py::arg("id"), py::arg("send_off"),
           py::arg("bytes"), py::arg("out_addr"), py::arg("root"), py::arg("stream_bytes"), py::arg("threads"),
           py::arg("timeout"), py::arg("push"), py::arg("what"), py::arg("count"),
           py::call_guard<py::gil_scoped_release>());
}
