"""`torch.compile(model, backend="tpu", options={...})`.

    dump_dir:        write each FX graph (`<name>.fx.py`) and its lowered
                     StableHLO (`<name>.<k>.stablehlo.mlir`) there
    xla_opt_level:   XLA backend optimization level (0-3; XLA's default if unset)
    dynamic_buckets: "pow2" (default) or an int bucket size, for dynamic=True
"""

import os

_KNOWN = {"dump_dir", "xla_opt_level", "dynamic_buckets"}


class Options:
    def __init__(self, options=None):
        options = dict(options or {})
        self.raw = options  # (what a cached graph is rebuilt with: output_code.TpuGraphCode)
        unknown = set(options) - _KNOWN
        if unknown:
            raise ValueError(f"torchtpu: unknown compile options {sorted(unknown)}; known: {sorted(_KNOWN)}")
        self.dump_dir = options.get("dump_dir") or os.environ.get("TORCHTPU_DUMP_DIR")
        self.xla_opt_level = options.get("xla_opt_level")
        self.dynamic_buckets = options.get("dynamic_buckets", "pow2")
        if self.dump_dir:
            os.makedirs(self.dump_dir, exist_ok=True)

    def jit_options(self) -> dict:
        if self.xla_opt_level is None:
            return {}
        return {"compiler_options": {"xla_backend_optimization_level": int(self.xla_opt_level)}}

    def cache_entry(self, kind, graph, key, example, device):
        """Where a graph's executable for this input signature persists
        (executable_cache.Entry): keyed by the graph's code and metadata, the
        signature, the argument types and the XLA level.  None while dumping
        HLO, which needs the lowering a cache hit skips."""
        from ..runtime import executable_cache

        if self.dump_dir:
            return None
        return executable_cache.Entry(
            kind, (graph.fingerprint(), key), example, device, ("xla_opt_level", self.xla_opt_level)
        )

    def dump_graph(self, name, gm):
        if self.dump_dir:
            with open(os.path.join(self.dump_dir, f"{name}.fx.py"), "w") as f:
                f.write(gm.code)

    def dump_hlo(self, name, index, lowered):
        if self.dump_dir:
            with open(os.path.join(self.dump_dir, f"{name}.{index}.stablehlo.mlir"), "w") as f:
                f.write(lowered.as_text())
