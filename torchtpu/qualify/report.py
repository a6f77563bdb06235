"""The qualification report: one dict (the JSON), rendered for the terminal
and as Markdown.

JSON layout (non-finite numbers are written as the strings "inf"/"nan"):

    qualify    the run's settings: model, steps, optimizer, lr, rtol, atol, seed, device,
               no_fallback, compile_cache_dir (+ whether it was a fresh temporary one)
    revision   torchtpu, torchtpu_commit, torch, jax, jaxlib, python, platform, device_kind,
               device_count, xla_flags, libtpu_init_args, float32_matmul_precision, environment
    modes      cpu | eager | compiled, each: status (REFERENCE/PASS/FAIL), losses, step_times,
               first_step_s, steady_step_s, throughput (+ throughput_unit); tpu modes also:
               deviation {outputs, losses, gradients: max_abs, max_rel, score (<= 1 passes)},
               ops [{op, count (first step), path (native/cpu-fallback/host), how, cpu_calls}],
               op_summary, first_step_fallbacks and fallbacks ({op: CPU calls}, first step / all
               steps), peak_memory_bytes, warm_cache_first_step_s, warm_cache_persistent_hits;
               compiled also: graph_breaks (+ reasons), recompilations (dynamo + XLA after the
               first step), compile (compile_stats() totals and per graph); error/traceback if it raised
    failures   why the result is FAIL, one line each
    notes      caveats (random ops, graph breaks, ...)
    pinpoint   when eager deviates: {op, step, phase, where, max_abs, max_rel, score, compared}
    result     PASS | FAIL, and exit_code
"""

import json
import math

from .ops import CPU_FALLBACK, HOST

MODE_TITLES = {"cpu": "cpu (reference)", "eager": "tpu eager", "compiled": "tpu compiled"}
QUANTITIES = ("outputs", "losses", "gradients")


def _jsonable(x):
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)  # JSON has no inf/nan; "inf" reads unambiguously
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def to_json(report) -> str:
    return json.dumps(_jsonable(report), indent=2)


# ------------------------------------------------------------- formatting


def _num(x, digits=2):
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    if not math.isfinite(x):
        return str(x)
    return f"{x:.{digits}e}" if x and (abs(x) < 1e-2 or abs(x) >= 1e4) else f"{x:.{digits + 1}g}"


def _seconds(s):
    if s is None:
        return "-"
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.2f} s"


def _bytes(n):
    if n is None:
        return "-"
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def _rate(m):
    if not m.get("throughput"):
        return "-"
    return f"{m['throughput']:,.0f} {m['throughput_unit']}"


def _summary_rows(report):
    modes = report["modes"]
    names = list(modes)

    def row(label, fn):
        return [label] + [fn(modes[n]) for n in names]

    def dev(q):
        def cell(m):
            if "deviation" not in m:
                return "-"
            d = m["deviation"][q]
            used = f"{d['score']:.0%}" if math.isfinite(d["score"]) else "inf"
            return f"{_num(d['max_abs'])} / {_num(d['max_rel'])} ({used} of tol)"

        return cell

    def fallbacks(m):
        if "op_summary" not in m:
            return "-"
        return "none" if not m.get("fallbacks") else f"{len(m['fallbacks'])} ops, {sum(m['fallbacks'].values())} calls"

    rows = [
        ["", *[MODE_TITLES[n] for n in names]],
        row("result", lambda m: m["status"]),
        *[row(f"{q} max abs / rel", dev(q)) for q in QUANTITIES],
        row("loss first -> last", lambda m: f"{m['losses'][0]:.4f} -> {m['losses'][-1]:.4f}" if m.get("losses") else "-"),
        row("first step, cold cache", lambda m: _seconds(m.get("first_step_s"))),
        row("first step, warm cache", lambda m: _seconds(m.get("warm_cache_first_step_s"))),
        row("steady step (median)", lambda m: _seconds(m.get("steady_step_s"))),
        row("throughput", _rate),
        row("peak device memory", lambda m: _bytes(m.get("peak_memory_bytes"))),
        row("aten ops (distinct/calls)", lambda m: f"{m['op_summary']['distinct']} / {m['op_summary']['calls']}"
            if "op_summary" in m else "-"),
        row("CPU fallbacks", fallbacks),
        row("graph breaks / recompiles", lambda m: f"{m['graph_breaks']} / {m['recompilations']}"
            if "graph_breaks" in m else "-"),
    ]
    return rows


def _op_rows(report):
    """One row per op: op, then 'count path (how)' per tpu mode."""
    names = [n for n in report["modes"] if "ops" in report["modes"][n]]
    by_mode = {n: {r["op"]: r for r in report["modes"][n]["ops"]} for n in names}
    ops = sorted({op for table in by_mode.values() for op in table})
    rows = [["aten op (first step)", *[MODE_TITLES[n] for n in names]]]
    for op in ops:
        cells = []
        for n in names:
            r = by_mode[n].get(op)
            if r is None:
                cells.append("")
            elif r["path"] == CPU_FALLBACK:
                cells.append(f"{r['count']} CPU FALLBACK")
            elif r["path"] == HOST:
                cells.append(f"{r['count']} host")
            else:
                cells.append(f"{r['count']} {r['how']}")
        rows.append([op, *cells])
    return rows


def _table(rows):
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for k, r in enumerate(rows):
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _md_table(rows):
    def esc(c):
        return str(c).replace("|", "\\|")

    lines = ["| " + " | ".join(esc(c) for c in rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows[1:]]
    return "\n".join(lines)


def _header(report):
    q, rev = report["qualify"], report["revision"]
    commit = rev["torchtpu_commit"]
    return [
        f"model: {q['model']}, {q['steps']} steps of forward + backward + {q['optimizer']} (lr {q['lr']}), "
        f"tolerance rtol {q['rtol']:g} atol {q['atol']:g}",
        f"revision: torchtpu {rev['torchtpu']} ({commit[:12]}{'+local-changes' if commit.endswith('+local-changes') else ''})"
        f" | torch {rev['torch']} | jax {rev['jax']} | jaxlib {rev['jaxlib']} | python {rev['python']}",
        f"device: {report['qualify']['device']} -> {rev['platform']} '{rev['device_kind']}' "
        f"({rev['device_count']} visible) | XLA_FLAGS {rev['xla_flags']} | "
        f"float32 matmul precision {rev['float32_matmul_precision']}",
    ]


def _verdict_lines(report):
    lines = []
    for reason in report["failures"]:
        lines.append(f"  - {reason}")
    p = report.get("pinpoint")
    if p:
        if p.get("op"):
            lines.append(
                f"  first deviating op (replayed op by op against the CPU): {p['op']} "
                f"in the {p['phase']} of step {p['step']}, max abs {_num(p['max_abs'])} / rel {_num(p['max_rel'])}"
            )
            lines.append(f"    at {p['where']}")
        elif p.get("error"):
            lines.append(f"  op-by-op replay failed: {p['error']}")
        else:
            lines.append(
                f"  op-by-op replay: none of {p['compared']} ops deviates beyond tolerance on identical inputs;"
                " the difference accumulates over many ops"
            )
    for note in report.get("notes", []):
        lines.append(f"  note: {note}")
    return lines


def render_text(report) -> str:
    ops = _op_rows(report)
    out = ["torchtpu qualify", *_header(report), "", _table(_summary_rows(report)), ""]
    if len(ops) > 1:
        out += [_table(ops), ""]
    out.append(f"RESULT: {report['result']}")
    out += _verdict_lines(report)
    return "\n".join(out) + "\n"


def render_markdown(report) -> str:
    out = ["# torchtpu qualify", ""]
    out += [f"- {line}" for line in _header(report)]
    out += ["", f"**Result: {report['result']}**", ""]
    out += ["- " + line.strip().removeprefix("- ") for line in _verdict_lines(report)]
    out += ["", "## Modes", "", _md_table(_summary_rows(report)), ""]
    ops = _op_rows(report)
    if len(ops) > 1:
        out += ["## Aten ops", "", _md_table(ops), ""]
    for name, m in report["modes"].items():
        if m.get("error"):
            out += [f"## Error in {MODE_TITLES[name]}", "", "```", m.get("traceback", m["error"]).rstrip(), "```", ""]
    return "\n".join(out)
