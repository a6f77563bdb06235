// Python bindings of the caching allocator (torch.tpu.memory_* in
// torchtpu/memory.py): statistics in CUDA's nested-dict shape, limits,
// empty_cache, memory history and snapshots in CUDA's schema, and the hooks
// through which the allocator reaches Python outside its hot paths.
#include <torch/extension.h>

#include "allocator.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/irange.h>
#include <torch/csrc/profiler/combined_traceback.h>
#include <torch/csrc/profiler/unwind/unwind.h>

#include <pybind11/stl.h>

#include <chrono>
#include <optional>

namespace py = pybind11;

// From torch/csrc/profiler/python/combined_traceback.h (libtorch_python),
// whose header needs nlohmann/json, which torch does not ship.
namespace torch {
std::vector<pybind11::object> py_symbolize(std::vector<CapturedTraceback*>& to_symbolize);
void freeDeadCapturedTracebackFrames();
}  // namespace torch

namespace torchtpu {

void drain_boxes();  // fastpath.cpp: apply storage events to the box table

namespace {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::RecordContext;

py::dict stat_dict(const Stat& stat) {
  py::dict d;
  d["current"] = stat.current;
  d["peak"] = stat.peak;
  d["allocated"] = stat.allocated;
  d["freed"] = stat.freed;
  return d;
}

py::dict stat_array_dict(const StatArray& stats) {
  // StatType order: AGGREGATE, SMALL_POOL, LARGE_POOL.
  static const char* const kNames[] = {"all", "small_pool", "large_pool"};
  py::dict d;
  for (const auto i : c10::irange(static_cast<size_t>(StatType::NUM_TYPES))) {
    d[kNames[i]] = stat_dict(stats[i]);
  }
  return d;
}

// torch.cuda.memory_stats_as_nested_dict's shape, key for key.
py::dict stats_dict(const DeviceStats& s) {
  py::dict d;
  d["num_alloc_retries"] = s.num_alloc_retries;
  d["num_ooms"] = s.num_ooms;
  d["max_split_size"] = s.max_split_size;
  d["num_sync_all_streams"] = s.num_sync_all_streams;
  d["num_device_alloc"] = s.num_device_alloc;
  d["num_device_free"] = s.num_device_free;
  d["num_oom_rejections"] = s.num_oom_rejections;
  d["allocation"] = stat_array_dict(s.allocation);
  d["segment"] = stat_array_dict(s.segment);
  d["active"] = stat_array_dict(s.active);
  d["inactive_split"] = stat_array_dict(s.inactive_split);
  d["allocated_bytes"] = stat_array_dict(s.allocated_bytes);
  d["reserved_bytes"] = stat_array_dict(s.reserved_bytes);
  d["active_bytes"] = stat_array_dict(s.active_bytes);
  d["inactive_split_bytes"] = stat_array_dict(s.inactive_split_bytes);
  d["requested_bytes"] = stat_array_dict(s.requested_bytes);
  d["oversize_allocations"] = stat_dict(s.oversize_allocations);
  d["oversize_segments"] = stat_dict(s.oversize_segments);
  return d;
}

// ------------------------------------------------------------- hooks

// The Python provider of physical numbers: provider(device) -> None or
// (bytes_in_use, bytes_limit).  Leaked: it may be needed at exit.
py::object* physical_provider = nullptr;

bool physical_info(c10::DeviceIndex device, size_t* used, size_t* total) {
  if (physical_provider == nullptr || !Py_IsInitialized()) {
    return false;
  }
  py::gil_scoped_acquire gil;
  py::object result = (*physical_provider)(static_cast<int>(device));
  if (result.is_none()) {
    return false;
  }
  auto numbers = result.cast<std::pair<int64_t, int64_t>>();
  if (numbers.second <= 0) {
    return false;
  }
  *used = static_cast<size_t>(std::max<int64_t>(0, numbers.first));
  *total = static_cast<size_t>(numbers.second);
  return true;
}

// empty_cache from C++ (torch.accelerator.empty_cache): where the caller
// holds the GIL, first drop the boxes of dead storages so that their blocks
// can be released too.  torch.tpu.empty_cache drains in Python first.
void before_empty_cache() {
  if (Py_IsInitialized() && PyGILState_Check()) {
    drain_boxes();
  }
}

// --------------------------------------------------------- history

std::shared_ptr<c10::GatheredContext> gather_python() {
  return torch::CapturedTraceback::gather(true, true, false);
}

std::shared_ptr<c10::GatheredContext> gather_all() {
  return torch::CapturedTraceback::gather(true, true, true);
}

const char* action_name(TraceAction action) {
  switch (action) {
    case TraceAction::kAlloc:
      return "alloc";
    case TraceAction::kFreeRequested:
      return "free_requested";
    case TraceAction::kFreeCompleted:
      return "free_completed";
    case TraceAction::kSegmentAlloc:
      return "segment_alloc";
    case TraceAction::kSegmentFree:
      return "segment_free";
    case TraceAction::kSnapshot:
      return "snapshot";
    case TraceAction::kOom:
      return "oom";
    default:
      return "unknown";
  }
}

void record_memory_history(
    std::optional<std::string> enabled,
    std::optional<std::string> context,
    const std::string& stacks,
    size_t max_entries,
    bool clear_history,
    const std::vector<std::string>& skip_actions) {
  TORCH_CHECK(
      !enabled || *enabled == "state" || *enabled == "all",
      "expected enabled to be 'state', 'all', or None");
  TORCH_CHECK(
      !context || *context == "state" || *context == "alloc" || *context == "all",
      "expected context to be 'state', 'alloc', 'all', or None");
  TORCH_CHECK(stacks == "python" || stacks == "all", "expected stacks to be 'python', or 'all'");
  HistoryConfig config;
  config.enabled = enabled.has_value();
  config.clear = clear_history;
  // "state" keeps no history of events, only the state (CUDA: one entry).
  config.max_entries = (enabled && *enabled == "all") ? max_entries : 1;
  config.gather = &gather_python;
  if (config.enabled && stacks == "all") {
    config.gather = &gather_all;
    torch::unwind::unwind();  // warm up C++ unwinding, as CUDA does
  }
  if (context) {
    config.when = *context == "all" ? RecordContext::ALL
        : *context == "alloc"       ? RecordContext::ALLOC
                                    : RecordContext::STATE;
  }
  for (const auto& name : skip_actions) {
    bool found = false;
    for (int a = 0; a < static_cast<int>(TraceAction::kNumActions); ++a) {
      if (name == action_name(static_cast<TraceAction>(a))) {
        config.skip_mask |= 1u << a;
        found = true;
      }
    }
    TORCH_CHECK(
        found || name == "segment_map" || name == "segment_unmap",
        "unknown action in skip_actions: ",
        name);
  }
  record_history(config);
  torch::freeDeadCapturedTracebackFrames();
}

// The snapshot as torch.cuda.memory._snapshot() returns it: segments (with
// their blocks), device_traces (per device, oldest first), allocator_settings.
py::dict memory_snapshot(bool include_traces) {
  AllocatorSnapshot snap = snapshot(include_traces);

  std::vector<torch::CapturedTraceback*> to_symbolize;
  std::vector<py::dict> frame_dest;
  py::list empty_frames;
  auto add_frames = [&](py::dict& d, const std::shared_ptr<c10::GatheredContext>& ctx) {
    auto* tb = ctx ? dynamic_cast<torch::CapturedTraceback*>(ctx.get()) : nullptr;
    if (tb != nullptr) {
      to_symbolize.push_back(tb);
      frame_dest.push_back(d);
    } else {
      d["frames"] = py::list();
    }
  };

  py::list segments;
  for (const auto& seg : snap.segments) {
    py::dict s;
    s["device"] = static_cast<int>(seg.device);
    s["address"] = seg.address;
    s["total_size"] = seg.total_size;
    s["allocated_size"] = seg.allocated_size;
    s["active_size"] = seg.active_size;
    s["requested_size"] = seg.requested_size;
    s["stream"] = 0;
    s["segment_type"] = seg.is_large ? "large" : "small";
    s["segment_pool_id"] = py::make_tuple(0, 0);
    s["is_expandable"] = seg.is_expandable;
    add_frames(s, seg.context_when_allocated);
    py::list blocks;
    size_t address = seg.address;
    for (const auto& b : seg.blocks) {
      py::dict block;
      block["address"] = address;
      block["size"] = b.size;
      block["requested_size"] = b.requested_size;
      block["state"] = b.allocated ? "active_allocated"
          : b.active               ? "active_pending_free"
                                   : "inactive";
      add_frames(block, b.context_when_allocated);
      address += b.size;
      blocks.append(block);
    }
    s["blocks"] = blocks;
    segments.append(s);
  }

  py::list traces;
  const size_t n_devices = std::max<size_t>(snap.device_traces.size(), 1);
  for (size_t device = 0; device < n_devices; ++device) {
    py::list trace;
    if (device < snap.device_traces.size()) {
      for (const auto& te : snap.device_traces[device]) {
        py::dict entry;
        entry["action"] = action_name(te.action);
        entry[te.action == TraceAction::kOom ? "device_free" : "addr"] = te.addr;
        entry["size"] = te.size;
        entry["stream"] = 0;
        entry["time_us"] = te.time_us;
        add_frames(entry, te.context);
        trace.append(entry);
      }
    }
    traces.append(trace);
  }

  py::dict settings;
  settings["PYTORCH_CUDA_ALLOC_CONF"] = "";
  settings["max_split_size"] = -1;
  settings["garbage_collection_threshold"] = 0.0;
  settings["expandable_segments"] = false;
  settings["pinned_num_register_threads"] = 1;
  settings["release_lock_on_cudamalloc"] = false;
  settings["pinned_use_cuda_host_register"] = false;
  settings["roundup_power2_divisions"] = py::dict();

  if (!to_symbolize.empty()) {
    auto frames = torch::py_symbolize(to_symbolize);
    for (const auto i : c10::irange(frames.size())) {
      frame_dest.at(i)["frames"] = frames.at(i);
    }
  }
  torch::freeDeadCapturedTracebackFrames();

  py::dict result;
  result["segments"] = segments;
  result["device_traces"] = traces;
  result["allocator_settings"] = settings;
  return result;
}

c10::DeviceIndex as_index(int device) {
  TORCH_CHECK(device >= 0, "torchtpu: invalid device index ", device);
  return static_cast<c10::DeviceIndex>(device);
}

}  // namespace

void register_memory_bindings(py::module& m) {
  set_memory_hooks(&before_empty_cache, &physical_info);

  m.def(
      "_memory_stats",
      [](int device) { return stats_dict(device_stats(as_index(device))); },
      "CUDA's memory_stats_as_nested_dict for one device.");
  m.def(
      "_memory_counters",
      [](int device) {
        const auto c = memory_counters(as_index(device));
        return py::make_tuple(c.allocated, c.peak_allocated, c.reserved, c.peak_reserved);
      },
      "(allocated, peak allocated, reserved, peak reserved) bytes");
  m.def("_reset_peak_memory_stats", [](int device) { reset_peak_stats(as_index(device)); });
  m.def("_reset_accumulated_memory_stats", [](int device) {
    reset_accumulated_stats(as_index(device));
  });
  m.def("_empty_cache", []() { empty_cache(); });
  m.def("_set_memory_fraction", [](double fraction, int device) {
    set_memory_fraction(fraction, as_index(device));
  });
  m.def("_get_memory_fraction", [](int device) { return memory_fraction(as_index(device)); });
  m.def(
      "_set_device_capacity",
      [](int device, int64_t bytes) {
        TORCH_CHECK(bytes >= 0, "capacity must be >= 0");
        set_device_capacity(static_cast<c10::DeviceIndex>(device), static_cast<size_t>(bytes));
      },
      "Device memory the allocator may fill (times the fraction); device -1: "
      "all devices; 0 bytes: the default (host RAM).");
  m.def("_device_capacity", [](int device) { return device_capacity(as_index(device)); });
  m.def("_host_physical_memory", []() { return host_physical_memory(); });
  m.def(
      "_mem_get_info",
      [](int device) { return memory_info(as_index(device)); },
      "(free, total) bytes, as torch.accelerator.get_memory_info");
  m.def(
      "_set_physical_memory_provider",
      [](py::object provider) {
        if (physical_provider == nullptr) {
          physical_provider = new py::object();
        }
        *physical_provider = std::move(provider);
      },
      "provider(device) -> None or (bytes_in_use, bytes_limit); used by "
      "mem_get_info / torch.accelerator.get_memory_info.");
  m.def(
      "_record_memory_history",
      &record_memory_history,
      py::arg("enabled"),
      py::arg("context"),
      py::arg("stacks"),
      py::arg("max_entries"),
      py::arg("clear_history"),
      py::arg("skip_actions"));
  m.def("_memory_snapshot", &memory_snapshot, py::arg("include_traces") = true);
  m.def(
      "_bench_allocator_roundtrip",
      [](int64_t nbytes, int64_t iterations) {
        TORCH_CHECK(nbytes > 0 && iterations > 0, "positive sizes and counts only");
        const double tpu_ns = benchmark_roundtrip_ns(static_cast<size_t>(nbytes), iterations);
        c10::Allocator* cpu = c10::GetCPUAllocator();
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < iterations; ++i) {
          c10::DataPtr p = cpu->allocate(static_cast<size_t>(nbytes));
        }
        const auto t1 = std::chrono::steady_clock::now();
        const double cpu_ns = std::chrono::duration<double, std::nano>(t1 - t0).count() /
            static_cast<double>(iterations);
        return py::make_tuple(tpu_ns, cpu_ns);
      },
      "(tpu allocator, torch CPU allocator) nanoseconds per allocate+free "
      "round trip, measured in C++.");
}

}  // namespace torchtpu
