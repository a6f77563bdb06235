"""Op coverage measured by PyTorch's OpInfo database: writes docs/ops.md.

    python -m torchtpu.tools.coverage                # all cases, 2 worker processes
    python -m torchtpu.tools.coverage --jobs 1 --ops 'linalg\\.' --json /tmp/r.json --no-docs

Each case of torchtpu/tools/opinfo.py (the same checks tests/test_opinfo.py
runs) gets a status: pass (native, matches the CPU), fallback (matches, but
some op ran on the CPU), fail (wrong value or error), skip (nothing to run).
The summary line counts an OpInfo entry as passing a column when its case
passes natively.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
import traceback

STATUSES = ("pass", "fallback", "fail", "skip")


def _run_shard(case_ids, out_path, timing=False):
    """Worker: run these cases, one JSON line each."""
    os.environ.setdefault("TORCHTPU_PLATFORM", "cpu")
    os.environ.setdefault("TORCHTPU_NUM_DEVICES", "2")
    import torch

    import torchtpu
    from torchtpu.tools import opinfo

    by_id = {c.id: c for c in opinfo.cases()}
    with open(out_path, "a") as out:
        for cid in case_ids:
            case = by_id[cid]
            c0 = torchtpu.kernel_cache_stats()["compiles"]
            t0 = time.perf_counter()
            torch.manual_seed(0)
            try:
                opinfo.run_case(case)
                status, message = "pass", ""
            except opinfo.Skip as e:
                status, message = "skip", str(e)
            except opinfo.FellBack as e:
                status, message = "fallback", str(e)
            except Exception as e:  # noqa: BLE001
                status = "fail"
                message = f"{type(e).__name__}: {e}".strip()
                if not str(e):
                    message += " " + traceback.format_exc(limit=-2).replace("\n", " | ")
            rec = dict(
                id=cid, kind=case.kind, op=case.op, dtype=opinfo.DTYPE_NAMES[case.dtype], status=status,
                message=message[:400], seconds=round(time.perf_counter() - t0, 3),
                compiles=torchtpu.kernel_cache_stats()["compiles"] - c0,
            )
            out.write(json.dumps(rec) + "\n")
            out.flush()


def run(jobs=2, pattern=None, kinds=None, dtypes=None):
    """All selected cases over `jobs` worker processes -> list of records."""
    os.environ.setdefault("TORCHTPU_PLATFORM", "cpu")
    from torchtpu.tools import opinfo

    ids = []
    for c in opinfo.cases():
        if pattern and not re.search(pattern, c.op):
            continue
        if kinds and c.kind not in kinds:
            continue
        if dtypes and opinfo.DTYPE_NAMES[c.dtype] not in dtypes:
            continue
        ids.append(c.id)
    tmp = f"/tmp/torchtpu-coverage-{os.getpid()}"
    os.makedirs(tmp, exist_ok=True)
    procs = []
    for j in range(jobs):
        shard = ids[j::jobs]
        ids_path = os.path.join(tmp, f"ids{j}.json")
        out_path = os.path.join(tmp, f"out{j}.jsonl")
        with open(ids_path, "w") as f:
            json.dump(shard, f)
        if os.path.exists(out_path):
            os.remove(out_path)
        code = (
            "import json,sys; from torchtpu.tools.coverage import _run_shard; "
            f"_run_shard(json.load(open({ids_path!r})), {out_path!r})"
        )
        procs.append((subprocess.Popen([sys.executable, "-c", code]), out_path, shard))
    records = []
    for proc, out_path, shard in procs:
        proc.wait()
        done = []
        if os.path.exists(out_path):
            with open(out_path) as f:
                done = [json.loads(line) for line in f if line.strip()]
        records.extend(done)
        if proc.returncode != 0 and len(done) < len(shard):  # a crash: mark the case it died in
            from torchtpu.tools import opinfo as oi

            by_id = {c.id: c for c in oi.cases()}
            case = by_id[shard[len(done)]]
            records.append(dict(id=case.id, kind=case.kind, op=case.op, dtype=oi.DTYPE_NAMES[case.dtype],
                                status="fail", message=f"worker crashed (exit {proc.returncode})",
                                seconds=0, compiles=0))  # fmt: skip
    return records


# ------------------------------------------------------------------ report


def _pct(n, d):
    return f"{100.0 * n / d:.1f}% ({n}/{d})" if d else "n/a"


def summary(records):
    from torchtpu.tools import opinfo

    by = {}
    for r in records:
        by[r["id"]] = r["status"]

    def rate(kind, dtype_names):
        n = d = 0
        for r in records:
            if r["kind"] != kind or (dtype_names and r["dtype"] not in dtype_names):
                continue
            if r["status"] == "skip":
                continue
            d += 1
            n += r["status"] == "pass"
        return n, d

    out = {
        "forward float32": rate("forward", ("float32",)),
        "backward float32": rate("backward", ()),
        "forward bfloat16": rate("forward", ("bfloat16",)),
        "forward float16": rate("forward", ("float16",)),
        "forward int/bool": rate("forward", ("int64", "int32", "bool")),
        "in-place": rate("inplace", ()),
        "out=": rate("out", ()),
        "non-contiguous": rate("noncontig", ()),
    }
    del opinfo, by
    return out


def write_docs(records, path, elapsed=None, compiles=None):
    from torchtpu.tools import opinfo

    rates = summary(records)
    line = " · ".join(f"{k}: {_pct(*v)}" for k, v in rates.items())
    ops = {}
    for r in records:
        ops.setdefault(r["op"], {})[(r["kind"], r["dtype"])] = r
    mark = {"pass": "✓", "fallback": "cpu", "fail": "✗", "skip": "–"}
    dtype_cols = [opinfo.DTYPE_NAMES[d] for d in opinfo.DTYPES]
    lines = [
        "# Op coverage (PyTorch OpInfo database on `tpu`)",
        "",
        f"**Summary** — {line}",
        "",
        "Generated by `python -m torchtpu.tools.coverage` from the checks of `tests/test_opinfo.py` "
        "(`torchtpu/tools/opinfo.py`): every OpInfo entry of `torch.testing._internal.common_methods_invocations.op_db` "
        "whose CPU kernel supports the dtype; its samples run on the CPU and on `tpu` and are compared "
        "(random ops: shape, dtype, range, reproducibility). A percentage counts entries that pass "
        "**natively** (nothing ran on the CPU) among those with something to run.",
        "",
        "Legend: ✓ native and correct · cpu: correct but some op fell back to the CPU · ✗ wrong or error · "
        "– nothing to run (no CPU sample for it) · blank: not supported by the op on CPU.",
    ]
    if elapsed is not None:
        lines += ["", f"Run: {len(records)} cases in {elapsed / 60:.1f} min, {compiles} XLA compilations."]
    header = "| op | " + " | ".join(dtype_cols) + " | backward | in-place | out= | non-contig |"
    lines += ["", header, "|" + "---|" * (len(dtype_cols) + 5)]
    for name in sorted(ops):
        row = ops[name]
        cells = []
        for dt in dtype_cols:
            r = row.get(("forward", dt))
            cells.append(mark[r["status"]] if r else "")
        for kind in ("backward", "inplace", "out", "noncontig"):
            r = next((v for (k, _), v in row.items() if k == kind), None)
            cells.append(mark[r["status"]] if r else "")
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    failing = [r for r in records if r["status"] in ("fail", "fallback")]
    if failing:
        lines += ["", "## Not passing natively", "", "| case | status | why |", "|---|---|---|"]
        for r in sorted(failing, key=lambda r: r["id"]):
            msg = r["message"].replace("|", "\\|").replace("\n", " ")[:200]
            lines.append(f"| `{r['id']}` | {r['status']} | {msg} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return line


def _reason(r):
    """One line: why the case does not pass natively."""
    msg = " ".join(r["message"].split())
    if r["status"] == "fallback":
        return "falls back to the CPU: " + msg.removeprefix("ops fell back to the CPU: ")[:160]
    return msg[:200] or "fails"


def write_expected_failures(records, path):
    bad = sorted((r for r in records if r["status"] in ("fail", "fallback")), key=lambda r: r["id"])
    with open(path, "w") as f:
        f.write("# OpInfo cases that do not pass natively on tpu: `case-id  # reason`, one a line.\n")
        f.write("# Strict (a listed case that passes fails tests/test_opinfo*.py), so it only shrinks.\n")
        f.write("# Regenerate: python -m torchtpu.tools.coverage --expected-failures tests/opinfo_expected_failures.txt\n")
        for r in bad:
            f.write(f"{r['id']}  # {_reason(r)}\n")
    return len(bad)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--ops", help="regex on OpInfo names")
    p.add_argument("--kinds", help="comma list: forward,backward,inplace,out,noncontig")
    p.add_argument("--dtypes", help="comma list of dtype names")
    p.add_argument("--json", help="also write the records here (JSON lines)")
    p.add_argument("--from-json", help="write docs from these records instead of running")
    p.add_argument("--output", default=os.path.join(os.path.dirname(__file__), "..", "..", "docs", "ops.md"))
    p.add_argument("--no-docs", action="store_true")
    p.add_argument("--expected-failures", metavar="PATH",
                   help="write the failing cases (fail, fallback) as tests/opinfo_expected_failures.txt")
    a = p.parse_args(argv)
    t0 = time.time()
    if a.from_json:
        with open(a.from_json) as f:
            records = [json.loads(line) for line in f if line.strip()]
    else:
        records = run(
            a.jobs, a.ops, a.kinds.split(",") if a.kinds else None, a.dtypes.split(",") if a.dtypes else None
        )
    elapsed = time.time() - t0
    compiles = sum(r.get("compiles", 0) for r in records)
    if a.json:
        with open(a.json, "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
    counts = {s: sum(r["status"] == s for r in records) for s in STATUSES}
    print(f"{len(records)} cases in {elapsed:.0f}s, {compiles} compilations: {counts}")
    for k, v in summary(records).items():
        print(f"  {k}: {_pct(*v)}")
    if a.expected_failures:
        n = write_expected_failures(records, a.expected_failures)
        print(f"wrote {a.expected_failures} ({n} cases)")
    if not a.no_docs:
        line = write_docs(records, os.path.normpath(a.output), None if a.from_json else elapsed, compiles)
        print("wrote", os.path.normpath(a.output))
        print(line)


if __name__ == "__main__":
    main()
