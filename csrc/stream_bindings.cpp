// Python bindings for streams and events (torch.tpu.Stream / Event), and the
// event hooks the DeviceGuardImpl calls (implemented in torchtpu/streams.py).
#include "device.h"
#include "streams.h"

#include <torch/extension.h>
#include <torch/library.h>

#include <pybind11/functional.h>

#include <atomic>

namespace py = pybind11;

namespace torchtpu {

namespace {

// Leaked: they hold Python callables and must outlive the interpreter.
struct EventHooks {
  py::object record;        // (id, device, stream_id, timing) -> None
  py::object query;         // (id) -> bool
  py::object synchronize;   // (id) -> None
  py::object elapsed;       // (start id, end id) -> float (ms)
  py::object destroy;       // (id) -> None
  py::object device_query;  // (device) -> bool
};
auto* g_hooks = new EventHooks();
std::atomic<bool> g_installed{false};
std::atomic<uint64_t> g_next_event{1};

bool python_alive() {
  return Py_IsInitialized() && !_Py_IsFinalizing();
}

void require_hooks() {
  TORCH_CHECK(
      g_installed.load(std::memory_order_acquire),
      "torchtpu: tpu events are not available (torchtpu.streams was not imported)");
}

}  // namespace

uint64_t new_event_id() {
  return g_next_event.fetch_add(1);
}

void event_record(uint64_t id, c10::DeviceIndex device, c10::StreamId stream, bool timing) {
  require_hooks();
  py::gil_scoped_acquire gil;
  g_hooks->record(id, int(device), int64_t(stream), timing);
}

bool event_query(uint64_t id) {
  if (!g_installed.load(std::memory_order_acquire) || !python_alive()) {
    return true;
  }
  py::gil_scoped_acquire gil;
  return g_hooks->query(id).cast<bool>();
}

void event_synchronize(uint64_t id) {
  if (!g_installed.load(std::memory_order_acquire) || !python_alive()) {
    return;
  }
  py::gil_scoped_acquire gil;
  g_hooks->synchronize(id);
}

double event_elapsed_ms(uint64_t start, uint64_t end) {
  require_hooks();
  py::gil_scoped_acquire gil;
  return g_hooks->elapsed(start, end).cast<double>();
}

void event_destroy(uint64_t id) noexcept {
  if (!g_installed.load(std::memory_order_acquire) || !python_alive()) {
    return;
  }
  try {
    py::gil_scoped_acquire gil;
    // An event freed while an exception propagates (a temporary's
    // elapsed_time raising) must leave that exception pending.
    py::error_scope keep_pending_error;
    g_hooks->destroy(id);
  } catch (...) {
    // Destruction must not throw (it may run from a destructor).
  }
}

bool device_query(c10::DeviceIndex device) {
  if (!g_installed.load(std::memory_order_acquire) || !python_alive()) {
    return true;
  }
  py::gil_scoped_acquire gil;
  return g_hooks->device_query(int(device)).cast<bool>();
}

namespace {

// tensor.record_stream(s): CUDA's caching allocator must not hand the memory
// to another stream before s's work is done.  Nothing to do here: a freed
// tpu storage only drops its box, and PJRT keeps the underlying buffer alive
// until every computation already using it has finished.
void record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(
      stream.device_type() == kTpu,
      "record_stream: expected a tpu stream, got a stream of ",
      stream.device());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("record_stream", TORCH_FN(record_stream));
}

py::tuple pack(const c10::Stream& s) {
  return py::make_tuple(int64_t(s.id()), int(s.device_index()));
}

}  // namespace

void register_stream_bindings(py::module& m) {
  m.def(
      "_set_event_hooks",
      [](py::object record,
         py::object query,
         py::object synchronize,
         py::object elapsed,
         py::object destroy,
         py::object device_query) {
        g_hooks->record = std::move(record);
        g_hooks->query = std::move(query);
        g_hooks->synchronize = std::move(synchronize);
        g_hooks->elapsed = std::move(elapsed);
        g_hooks->destroy = std::move(destroy);
        g_hooks->device_query = std::move(device_query);
        g_installed.store(true, std::memory_order_release);
      },
      "Install the Python implementation of tpu events: record(id, device, "
      "stream_id, timing), query(id), synchronize(id), elapsed(start, end) in "
      "ms, destroy(id), device_query(device).");

  m.def(
      "_current_stream",
      [](int device) { return pack(current_stream(static_cast<c10::DeviceIndex>(device))); },
      "(stream_id, device_index) of the calling thread's current stream on a "
      "device (-1: the current device).");
  m.def(
      "_default_stream",
      [](int device) {
        auto d = static_cast<c10::DeviceIndex>(device < 0 ? current_device() : device);
        check_device_index(d);
        return pack(c10::Stream(c10::Stream::DEFAULT, c10::Device(kTpu, d)));
      },
      "(stream_id, device_index) of a device's default stream.");
  m.def(
      "_exchange_stream",
      [](int64_t stream_id, int device) {
        return pack(exchange_stream(c10::Stream(
            c10::Stream::UNSAFE,
            c10::Device(kTpu, static_cast<c10::DeviceIndex>(device)),
            static_cast<c10::StreamId>(stream_id))));
      },
      "Make a stream current on its device for this thread; returns the "
      "previous one.");
  m.def(
      "_stream_priority",
      [](int64_t stream_id) { return stream_priority(static_cast<c10::StreamId>(stream_id)); },
      "The priority a stream was created with (0 or negative).");
  m.def(
      "_stream_priority_range",
      []() { return py::make_tuple(0, kMinPriority); },
      "(least, greatest) stream priority, as torch.cuda.Stream.priority_range.");
}

}  // namespace torchtpu
