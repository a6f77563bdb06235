"""`torchtpu qualify`: the command end to end, in subprocesses (as a user runs
it), asserting on its JSON report and exit codes.  Never on wall-clock times."""

import json
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ("cpu", "eager", "compiled")
REVISION_FIELDS = ("torchtpu", "torchtpu_commit", "torch", "jax", "jaxlib", "python", "platform", "device_kind",
                   "xla_flags")


def _env(tmp_path, extra_path=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, ROOT, env.get("PYTHONPATH")) if p)
    env["TORCHTPU_PLATFORM"] = "cpu"
    env["TORCHTPU_NUM_DEVICES"] = "1"
    env["TORCHTPU_CPU_FALLBACK"] = "silent"
    env["TORCHTPU_COMPILE_CACHE_DIR"] = str(tmp_path / "xla-cache")  # never the user's cache
    return env


def qualify(tmp_path, *args, prelude=None, extra_path=None):
    """Run `python -m torchtpu qualify ARGS --json ...`; `prelude`: Python run
    first in the same process (test-only changes to our lowering table).
    Returns (exit code, report or None, stdout, stderr)."""
    out = tmp_path / "report.json"
    argv = [*args, "--json", str(out), "--no-progress"]
    if prelude is None:
        cmd = [sys.executable, "-m", "torchtpu", "qualify", *argv]
    else:
        script = prelude + f"\nfrom torchtpu.cli import main\nraise SystemExit(main({['qualify', *argv]!r}))\n"
        cmd = [sys.executable, "-c", script]
    proc = subprocess.run(cmd, cwd=str(tmp_path), env=_env(tmp_path, extra_path), capture_output=True, text=True,
                          timeout=600)
    report = json.loads(out.read_text()) if out.exists() else None
    return proc.returncode, report, proc.stdout, proc.stderr


def _finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


def check_report(report):
    """What every passing report must state."""
    assert report["result"] == "PASS", report["failures"]
    assert set(report["modes"]) == set(MODES)
    for field in REVISION_FIELDS:
        assert report["revision"][field], field
    assert report["revision"]["platform"] == "cpu"
    steps = report["qualify"]["steps"]
    reference = report["modes"]["cpu"]
    assert len(reference["losses"]) == steps and all(_finite(v) for v in reference["losses"])
    for name in ("eager", "compiled"):
        m = report["modes"][name]
        assert m["status"] == "PASS", (name, m.get("error"))
        assert len(m["losses"]) == steps
        for quantity in ("outputs", "losses", "gradients"):
            d = m["deviation"][quantity]
            assert _finite(d["max_abs"]) and _finite(d["max_rel"]) and _finite(d["score"]), (name, quantity, d)
            assert d["score"] <= 1.0 and d["elements"] > 0, (name, quantity, d)
        rows = m["ops"]
        assert rows and m["op_summary"]["distinct"] > 0 and m["op_summary"]["calls"] > 0
        assert all(r["count"] > 0 for r in rows)
        check_fallback_consistency(m)
        assert _finite(m["first_step_s"]) and _finite(m["steady_step_s"]) and m["throughput"] > 0
        assert m["peak_memory_bytes"] > 0
    compiled = report["modes"]["compiled"]
    assert compiled["graph_breaks"] == 0 and compiled["recompilations"] == 0
    assert compiled["compile"]["graphs"] >= 2  # forward and backward
    assert any(r["how"] == "compiled graph" for r in compiled["ops"])


def check_fallback_consistency(mode):
    """The op table says CPU fallback exactly where torchtpu.fallback_counts() counted one."""
    counted = mode["first_step_fallbacks"]
    table = {r["op"]: r["cpu_calls"] for r in mode["ops"] if r["path"] == "cpu-fallback"}
    assert table == counted
    assert mode["op_summary"]["cpu_fallback_calls"] == sum(counted.values())
    assert all(r["cpu_calls"] == 0 for r in mode["ops"] if r["path"] != "cpu-fallback")


def test_default_gpt(tmp_path):
    md, png = tmp_path / "report.md", tmp_path / "losses.png"
    code, report, stdout, stderr = qualify(tmp_path, "--steps", "2", "--markdown", str(md), "--plot", str(png))
    assert code == 0, stdout + stderr
    check_report(report)
    assert report["qualify"]["model"] == "gpt (built-in)"
    eager_ops = {r["op"]: r for r in report["modes"]["eager"]["ops"]}
    for op in ("aten.addmm.default", "aten.native_layer_norm.default", "aten.gelu.default"):
        assert eager_ops[op]["path"] == "native" and eager_ops[op]["how"] == "lowered"
    assert report["modes"]["eager"]["throughput_unit"] == "tokens/s"
    for name in ("eager", "compiled"):  # the warm-cache step loaded its executables from the persistent cache
        assert report["modes"][name]["warm_cache_persistent_hits"] > 0
        assert _finite(report["modes"][name]["warm_cache_first_step_s"])
    assert report["qualify"]["compile_cache_dir_temporary"]
    assert "RESULT: PASS" in stdout and "aten.addmm.default" in stdout
    assert "**Result: PASS**" in md.read_text()
    pytest.importorskip("matplotlib")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_default_cnn(tmp_path):
    code, report, stdout, stderr = qualify(tmp_path, "--model", "cnn", "--steps", "2", "--no-warm-cache")
    assert code == 0, stdout + stderr
    check_report(report)
    eager_ops = {r["op"] for r in report["modes"]["eager"]["ops"]}
    assert "aten.convolution.default" in eager_ops and "aten.convolution_backward.default" in eager_ops
    assert report["modes"]["eager"]["throughput_unit"] == "samples/s"


WRONG_GELU = textwrap.dedent(
    """
    import dataclasses, torch
    import torchtpu.ops.lowerings  # fills the table; nothing is compiled yet in this process
    from torchtpu.ops.registry import LOWERINGS
    op = torch.ops.aten.gelu.default
    right = LOWERINGS[op]
    LOWERINGS[op] = dataclasses.replace(right, fn=lambda ctx, *a, **k: right.fn(ctx, *a, **k) * 1.01)
    """
)


def test_wrong_lowering_fails_and_is_pinpointed(tmp_path):
    code, report, stdout, stderr = qualify(tmp_path, "--steps", "1", "--no-warm-cache", prelude=WRONG_GELU)
    assert code == 1, stdout + stderr
    assert report["result"] == "FAIL"
    assert report["modes"]["eager"]["status"] == "FAIL"
    assert report["modes"]["eager"]["deviation"]["outputs"]["score"] > 1
    p = report["pinpoint"]
    assert p["op"] == "aten.gelu.default"
    assert p["step"] == 0 and p["phase"] == "forward"
    assert "models.py" in p["where"] and "gelu" in p["where"]  # the model line calling F.gelu
    assert "aten.gelu.default" in stdout and "RESULT: FAIL" in stdout


# bmm has no PyTorch decomposition, so without its lowerings it runs on the
# CPU: in eager mode (bmm.default is ATen's composite of bmm.out, which falls
# back) and in the compiled graphs that contain it (they then run op by op).
WRONG_GELU_BACKWARD = textwrap.dedent(
    """
    import dataclasses, torch
    import torchtpu.ops.lowerings
    from torchtpu.ops.registry import LOWERINGS
    op = torch.ops.aten.gelu_backward.default
    right = LOWERINGS[op]
    LOWERINGS[op] = dataclasses.replace(right, fn=lambda ctx, *a, **k: right.fn(ctx, *a, **k) + 0.01)
    """
)


def test_wrong_backward_lowering_is_pinpointed_at_its_forward_line(tmp_path):
    """A backward op is named with the autograd node and the model line whose forward created it."""
    (tmp_path / "mlp.py").write_text(MLP_FACTORY)
    code, report, stdout, stderr = qualify(tmp_path, str(tmp_path / "mlp.py") + ":make", "--steps", "1",
                                           "--no-warm-cache", prelude=WRONG_GELU_BACKWARD)
    assert code == 1, stdout + stderr
    assert report["modes"]["eager"]["deviation"]["gradients"]["score"] > 1
    assert report["modes"]["eager"]["deviation"]["outputs"]["score"] <= 1  # forward is right
    p = report["pinpoint"]
    assert p["op"] == "aten.gelu_backward.default" and p["phase"] == "backward"
    assert "GeluBackward0" in p["where"] and "models.py" in p["where"], p["where"]


MLP_FACTORY = "import torch\nfrom torchtpu.models import MLP\n" \
    "def make():\n    torch.manual_seed(0)\n    return MLP(), torch.randn(8, 32)\n"


NO_BMM = textwrap.dedent(
    """
    import torch
    import torchtpu.ops.lowerings
    from torchtpu.ops.registry import LOWERINGS
    for op in [op for op in LOWERINGS if op.name().startswith("aten::bmm")]:
        del LOWERINGS[op]  # test-only
    # attention through ATen's math path (bmm) rather than the fused op
    for backend in ("flash", "mem_efficient", "cudnn"):
        getattr(torch.backends.cuda, f"enable_{backend}_sdp")(False)
    torch._C._set_sdp_use_overrideable(False)
    """
)


def test_fallback_is_reported_and_no_fallback_fails(tmp_path):
    code, report, stdout, stderr = qualify(tmp_path, "--steps", "1", "--no-warm-cache", "--no-fallback",
                                           prelude=NO_BMM)
    assert code == 1, stdout + stderr
    for name in ("eager", "compiled"):
        m = report["modes"][name]
        fell_back = [op for op in m["first_step_fallbacks"] if op.startswith("aten.bmm.")]
        assert fell_back, m["first_step_fallbacks"]
        check_fallback_consistency(m)
        rows = {r["op"]: r for r in m["ops"]}
        assert all(rows[op]["path"] == "cpu-fallback" for op in fell_back)
        assert all(d["score"] <= 1 for d in m["deviation"].values())  # right, only slow
        assert m["status"] == "FAIL"
    assert report["modes"]["compiled"]["compile"]["eager_fallback_graphs"] > 0
    assert any("--no-fallback" in f and "aten.bmm." in f for f in report["failures"])
    assert "CPU FALLBACK" in stdout


BAD_FACTORIES = textwrap.dedent(
    """
    import torch

    def raises():
        raise ValueError("no weights for you")

    def mismatched():
        return torch.nn.Linear(4, 2), torch.randn(3, 4, device="tpu")

    def not_a_tuple():
        return torch.nn.Linear(4, 2)
    """
)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("badmods:raises", "raised ValueError: no weights for you"),
        ("badmods:mismatched", "different devices (model parameters and buffers on cpu; inputs on tpu:0)"),
    ],
)
def test_bad_factory_exits_2(tmp_path, spec, message):
    (tmp_path / "badmods.py").write_text(BAD_FACTORIES)
    code, report, stdout, stderr = qualify(tmp_path, spec, "--steps", "1", extra_path=str(tmp_path))
    assert code == 2, stdout + stderr
    assert report is None
    assert "torchtpu qualify: error:" in stderr and message in stderr, stderr


@pytest.mark.parametrize(
    "factory, message",
    [
        ("not_a_tuple", "must return (model, example_batch, loss_fn) or (model, inputs)"),
        ("missing", "has no attribute 'missing'"),
        (None, "MODEL must be 'package.module:factory'"),
    ],
)
def test_bad_model_spec_exits_2_in_process(tmp_path, capsys, monkeypatch, factory, message):
    from torchtpu.qualify.cli import main

    (tmp_path / "badmods.py").write_text(BAD_FACTORIES)
    spec = f"{tmp_path / 'badmods.py'}:{factory}" if factory else "no_colon"
    monkeypatch.setenv("TORCHTPU_COMPILE_CACHE_DIR", str(tmp_path / "cache"))
    assert main([spec, "--json", str(tmp_path / "r.json")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


def test_user_factory_file_and_default_loss(tmp_path):
    """file.py:factory returning (model, inputs): the default loss drives backward."""
    (tmp_path / "mlp.py").write_text(MLP_FACTORY)
    code, report, stdout, stderr = qualify(tmp_path, str(tmp_path / "mlp.py") + ":make", "--steps", "2",
                                           "--no-warm-cache", "--optimizer", "sgd")
    assert code == 0, stdout + stderr
    check_report(report)


def test_deviation_treats_nan_as_infinite():
    from torchtpu.qualify.compare import deviation

    d = deviation([torch.tensor([1.0, float("nan")])], [torch.tensor([1.0, 2.0])], rtol=1e-3, atol=1e-5)
    assert d["score"] == math.inf and d["max_abs"] == math.inf
    d = deviation([torch.tensor([1.0, float("nan")])], [torch.tensor([1.0, float("nan")])], rtol=1e-3, atol=1e-5)
    assert d["score"] == 0.0


def test_torchtpu_command_dispatch(capsys):
    """`torchtpu` (the console script, = python -m torchtpu) knows its commands."""
    from torchtpu.cli import main

    assert main([]) == 2 and "qualify" in capsys.readouterr().out
    assert main(["--help"]) == 0
    assert main(["bogus"]) == 2 and "unknown command 'bogus'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["qualify", "--help"])
    assert exit_info.value.code == 0 and "--no-fallback" in capsys.readouterr().out


def test_attention_counts_as_random_only_when_it_drops():
    from torchtpu.qualify.ops import draws_random

    attention = torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default
    q = torch.empty(1, 1, 2, 2)
    assert not draws_random(attention, ((q, q, q, None, 0.0), {}))
    assert draws_random(attention, ((q, q, q), {"dropout_p": 0.1}))
    assert draws_random(torch.ops.aten.native_dropout.default, ((q, 0.1, True), {}))
    assert not draws_random(torch.ops.aten.add.Tensor, ((q, q), {}))
