"""`torchtpu qualify [MODEL] [options]`.

Exit codes: 0 every mode passed (and, with --no-fallback, nothing fell back
to the CPU); 1 FAIL; 2 bad input (the factory cannot be loaded, raises,
returns the wrong things or tensors on several devices, or the model fails
on the CPU reference run)."""

import argparse
import os
import sys
import tempfile

from .compare import DEFAULT_ATOL, DEFAULT_RTOL

EXIT_PASS, EXIT_FAIL, EXIT_BAD_INPUT = 0, 1, 2


def add_arguments(parser):
    parser.add_argument(
        "model_spec", nargs="?", metavar="MODEL",
        help="package.module:factory or file.py:factory returning (model, example_batch, loss_fn) or "
        "(model, inputs); default: the built-in model chosen by --model",
    )
    parser.add_argument("--model", default="gpt", choices=("gpt", "cnn"), help="built-in model (default gpt)")
    parser.add_argument("--steps", type=int, default=10, help="optimizer steps per mode (default 10)")
    parser.add_argument("--optimizer", default="adamw", choices=("adamw", "sgd"), help="default adamw")
    parser.add_argument("--lr", type=float, default=1e-3, help="learning rate (default 1e-3)")
    parser.add_argument("--rtol", type=float, default=DEFAULT_RTOL, help=f"relative tolerance (default {DEFAULT_RTOL:g})")
    parser.add_argument("--atol", type=float, default=DEFAULT_ATOL, help=f"absolute tolerance (default {DEFAULT_ATOL:g})")
    parser.add_argument("--device", default="tpu", help="device to qualify (default tpu, i.e. tpu:current)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-fallback", action="store_true", help="FAIL if any op fell back to the CPU")
    parser.add_argument("--json", metavar="PATH", help="write the full report as JSON")
    parser.add_argument("--markdown", metavar="PATH", help="write the report as Markdown")
    parser.add_argument("--plot", metavar="PATH", help="write a PNG of the three loss curves (needs matplotlib)")
    parser.add_argument(
        "--cache-dir", metavar="DIR",
        help="persistent compilation cache to use (default: a fresh temporary one, so the first step is a cold start)",
    )
    parser.add_argument("--no-warm-cache", action="store_true", help="skip the warm-cache warm-up measurement")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


class Progress:
    """One bar per mode on stderr (a line per mode when stderr is not a terminal)."""

    def __init__(self, enabled):
        self.enabled = enabled
        self.tty = sys.stderr.isatty()

    def __call__(self, mode, done, total):
        if not self.enabled:
            return
        if self.tty:
            width = 30
            filled = width * done // total
            sys.stderr.write(f"\r  {mode:<9} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
            if done == total:
                sys.stderr.write("\n")
        elif done == total:
            sys.stderr.write(f"  {mode}: {total} steps done\n")
        sys.stderr.flush()

    def note(self, text):
        if self.enabled:
            sys.stderr.write(f"  {text}\n")
            sys.stderr.flush()


def _fail(message):
    print(f"torchtpu qualify: error: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def run(args) -> int:
    if args.steps < 1:
        return _fail("--steps must be at least 1")
    if args.rtol < 0 or args.atol < 0:
        return _fail("--rtol and --atol must be non-negative")
    # Before JAX starts (it reads the directory once): a fresh cache makes the
    # first step a cold start.  Called in a process where JAX already runs,
    # the cache in effect stays, and the report says which directory it is.
    temp_cache = None
    saved = os.environ.get("TORCHTPU_COMPILE_CACHE_DIR")
    if args.cache_dir:
        os.environ["TORCHTPU_COMPILE_CACHE_DIR"] = args.cache_dir
    else:
        temp_cache = tempfile.TemporaryDirectory(prefix="torchtpu-qualify-cache-")
        os.environ["TORCHTPU_COMPILE_CACHE_DIR"] = temp_cache.name
    try:
        return _run(args)
    finally:
        if saved is None:
            os.environ.pop("TORCHTPU_COMPILE_CACHE_DIR", None)
        else:
            os.environ["TORCHTPU_COMPILE_CACHE_DIR"] = saved
        if temp_cache is not None:
            temp_cache.cleanup()


def _run(args) -> int:
    import torch

    import torchtpu  # noqa: F401  (registers the device)

    from . import plot, report as report_mod, revision, workload as workload_mod
    from .compare import compare_run, passed
    from .runner import run_mode

    try:
        device = torch.device(args.device)
    except RuntimeError as e:
        return _fail(f"bad --device {args.device!r}: {e}")
    if device.type != "tpu":
        return _fail(f"--device must be a tpu device, not {args.device!r}")
    if not torch.tpu.is_available():
        return _fail("no tpu device is available (see TORCHTPU_PLATFORM)")
    if device.index is not None and device.index >= torch.tpu.device_count():
        return _fail(f"{args.device} does not exist ({torch.tpu.device_count()} tpu devices)")
    try:
        work = workload_mod.build(args.model_spec, args.model)
    except workload_mod.BadInput as e:
        return _fail(str(e))

    progress = Progress(not args.no_progress)
    common = dict(optimizer=args.optimizer, lr=args.lr, device=args.device, seed=args.seed)
    try:
        reference = run_mode("cpu", work, args.steps, progress=progress, **common)
    except workload_mod.BadInput as e:
        return _fail(str(e))
    except Exception as e:
        return _fail(f"the model fails on the CPU reference run: {type(e).__name__}: {e}")
    records = {"cpu": reference}
    for mode in ("eager", "compiled"):
        records[mode] = run_mode(mode, work, args.steps, warm_cache=not args.no_warm_cache, progress=progress, **common)

    from ..runtime import compile_cache

    report = {
        "qualify": dict(
            model=work.name if args.model_spec else f"{work.name} (built-in)", steps=args.steps,
            optimizer=args.optimizer, lr=args.lr, rtol=args.rtol, atol=args.atol, seed=args.seed,
            device=args.device, no_fallback=args.no_fallback, compile_cache_dir=_cache_in_effect(),
            compile_cache_dir_temporary=not args.cache_dir and _cache_in_effect() == compile_cache.directory(),
        ),
        "revision": revision.collect(args.device),
        "modes": {},
        "failures": [],
        "notes": list(work.notes),
        "pinpoint": None,
    }
    for mode, rec in records.items():
        m = {k: v for k, v in rec.items() if k not in ("outputs", "gradients")}
        if mode == "cpu":
            m["status"] = "REFERENCE"
        elif rec.get("error"):
            m["status"] = "FAIL"
            report["failures"].append(f"{mode}: raised {rec['error']}")
        else:
            m["deviation"] = compare_run(rec, reference, args.rtol, args.atol)
            ok = passed(m["deviation"])
            for q, d in m["deviation"].items():
                if d["score"] > 1.0:
                    report["failures"].append(
                        f"{mode}: {q} deviate beyond tolerance (max abs {report_mod._num(d['max_abs'])}, "
                        f"max rel {report_mod._num(d['max_rel'])}"
                        + (f", worst parameter {d['worst_parameter']}" if q == "gradients" and "worst_parameter" in d else "")
                        + (f"; {d['error']}" if d.get("error") else "") + ")"
                    )
            if args.no_fallback and rec.get("fallbacks"):
                ok = False
                report["failures"].append(
                    f"{mode}: ops fell back to the CPU (--no-fallback): {', '.join(sorted(rec['fallbacks']))}"
                )
            m["status"] = "PASS" if ok else "FAIL"
        if "ops" in m:
            from .ops import summary

            m["op_summary"] = summary(m["ops"])
        report["modes"][mode] = m
    _notes(report)

    eager = report["modes"]["eager"]
    if "deviation" in eager and not passed(eager["deviation"]):
        progress.note("eager mode deviates: replaying it op by op against the CPU ...")
        from .replay import pinpoint

        try:
            report["pinpoint"] = pinpoint(work, args.steps, args.optimizer, args.lr, torch.device(args.device),
                                          args.seed, args.rtol, args.atol)
        except Exception as e:
            report["pinpoint"] = dict(op=None, error=f"{type(e).__name__}: {e}")

    compiled = report["modes"]["compiled"]
    if "deviation" in eager and passed(eager["deviation"]) and "deviation" in compiled and not passed(
        compiled["deviation"]
    ):
        report["notes"].append(
            "eager mode is within tolerance and compiled mode is not: the deviation comes from compiling the "
            "graph (see compile.per_graph in the JSON; options={'dump_dir': ...} dumps the graphs)"
        )
    report["result"] = "PASS" if not report["failures"] else "FAIL"
    report["exit_code"] = EXIT_PASS if report["result"] == "PASS" else EXIT_FAIL
    sys.stdout.write(report_mod.render_text(report))
    if args.json:
        with open(args.json, "w") as f:
            f.write(report_mod.to_json(report))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(report_mod.render_markdown(report))
    if args.plot:
        try:
            plot.loss_curves(report, args.plot)
        except plot.PlotUnavailable as e:
            print(f"torchtpu qualify: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
    return report["exit_code"]


def _cache_in_effect():
    from ..runtime import compile_cache

    if not compile_cache.enabled():
        return None
    return compile_cache.directory()


def _notes(report):
    random_ops = set()
    for m in report["modes"].values():
        for r in m.get("ops", []):
            if r.get("random") and r["path"] != "host":  # (ops.draws_random: fused attention only with dropout)
                random_ops.add(r["op"])
    if random_ops:
        report["notes"].append(
            f"the model uses random ops ({', '.join(sorted(random_ops))}): the CPU and tpu draw different random "
            "numbers, so their results are not comparable; qualify a configuration without dropout/random ops"
        )
    if report["qualify"]["compile_cache_dir"] is None and any(
        "warm_cache_first_step_s" in m for m in report["modes"].values()
    ):
        report["notes"].append(
            "the persistent compilation cache is off (TORCHTPU_COMPILE_CACHE=0): the warm-cache first step "
            "compiled everything again"
        )
    compiled = report["modes"].get("compiled", {})
    if compiled.get("graph_breaks"):
        report["notes"].append(
            f"torch.compile broke the graph {compiled['graph_breaks']} times (the Python between graphs runs "
            "eagerly; its ops are not in the compiled op table): " + "; ".join(compiled["graph_break_reasons"])
        )
    if compiled.get("recompilations"):
        report["notes"].append(
            f"after the first step torch.compile recompiled {compiled['dynamo_recompilations']} frames and XLA "
            f"{compiled['xla_recompilations']} executables (a steady training loop compiles nothing more)"
        )
    if any(m.get("peak_memory_since_process_start") for m in report["modes"].values()):
        report["notes"].append(
            "peak device memory is the peak since the process started (the peak statistics "
            "cannot be reset here), so the compiled figure includes the eager run"
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="torchtpu qualify",
        description="Run a model on the CPU (reference), tpu eager and tpu compiled; report ops, deviations, "
        "timings, memory and the revision; exit 0 only if every mode passes.",
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))
