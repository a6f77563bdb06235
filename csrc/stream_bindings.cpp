// Python bindings for streams and events (torch.tpu.Stream / Event).
#include <torch/extension.h>

namespace py = pybind11;

namespace torchtpu {

void register_stream_bindings(py::module& m) {}

}  // namespace torchtpu
