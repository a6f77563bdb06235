"""Compile telemetry: `torchtpu.compile_stats()`."""

from collections import Counter
from dataclasses import asdict, dataclass, field


@dataclass
class GraphStats:
    name: str
    ops: int = 0
    requests: int = 0  # calls of the compiled graph
    hits: int = 0  # calls served by an executable already built in this process
    compilations: int = 0  # executables built (one per input signature)
    persistent_hits: int = 0  # of those, loaded from the on-disk cache
    compile_seconds: float = 0.0  # tracing + lowering + XLA compile (or cache load)
    fallback: str = ""  # why the graph runs op by op, if it does
    op_counts: dict = field(default_factory=dict)  # aten overload (str) -> occurrences in the graph


_graphs: list = []


def register(name, graph=None, fallback="", ops=None):
    """`graph`: a GraphLowering; `ops`: the aten targets of a graph that falls back."""
    ops = graph.ops if graph is not None else (ops or [])
    stats = GraphStats(name=name, ops=len(ops), fallback=fallback, op_counts=dict(Counter(str(op) for op in ops)))
    _graphs.append(stats)
    return stats


def snapshot() -> dict:
    graphs = [asdict(g) for g in _graphs]
    totals = {
        key: sum(g[key] for g in graphs)
        for key in ("requests", "hits", "compilations", "persistent_hits", "compile_seconds")
    }
    totals["graphs"] = len(graphs)
    totals["eager_fallback_graphs"] = sum(1 for g in graphs if g["fallback"])
    return dict(totals, per_graph=graphs)


def reset():
    _graphs.clear()


