// Python bindings of the allocator's statistics (torch.tpu.memory_*).
#include "allocator.h"

#include <torch/extension.h>

namespace py = pybind11;

namespace torchtpu {

void register_memory_bindings(py::module& m) {
  m.def("_basic_memory_stats", [](int device) {
    const auto s = basic_stats(static_cast<c10::DeviceIndex>(device));
    py::dict d;
    d["allocated_bytes"] = s.allocated_bytes;
    d["peak_allocated_bytes"] = s.peak_allocated_bytes;
    d["reserved_bytes"] = s.reserved_bytes;
    d["peak_reserved_bytes"] = s.peak_reserved_bytes;
    d["allocations"] = s.allocations;
    d["peak_allocations"] = s.peak_allocations;
    d["pending_free_bytes"] = s.pending_free_bytes;
    return d;
  });
}

}  // namespace torchtpu
