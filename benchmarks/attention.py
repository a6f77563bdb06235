"""scaled_dot_product_attention on tpu: the fused op against ATen's math path
(matmul, softmax, matmul), side by side in one process so that machine noise
hits both alike:

    python benchmarks/attention.py [--rounds 25]

Rows: forward + backward of one causal attention call at a few sizes (and
one with dropout), a TransformerEncoderLayer training step with dropout, and
the GPT training step (2 layers, d=128, batch 8x64, AdamW fused) eager and
under torch.compile(backend="tpu").  `sdpa_kernel([SDPBackend.MATH])` selects
the math path, `sdpa_kernel([SDPBackend.OVERRIDEABLE])` the fused op.
Milliseconds, the median of the rounds; torch CPU for reference."""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TORCHTPU_PLATFORM", "cpu")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import torchtpu  # noqa: E402,F401

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compile as gpt_bench  # noqa: E402  (the GPT and its loss, as benchmarks/compile.py builds them)

PATHS = {"math path": SDPBackend.MATH, "fused": SDPBackend.OVERRIDEABLE}


def attention_step(device, shape, dropout_p=0.0):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(shape, generator=g).to(device).requires_grad_() for _ in range(3))

    def step():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)
        out.sum().backward()
        return out

    return step


def gpt_step(compiled):
    model, (x, y) = gpt_bench._make("gpt")
    model, x, y = model.to("tpu"), x.to("tpu"), y.to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    forward = torch.compile(model, backend="tpu") if compiled else model

    def step():
        loss = gpt_bench._torch_loss("gpt", forward, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step


def encoder_step():
    """A training step of PyTorch's TransformerEncoderLayer with dropout 0.1
    (its attention's too), eager."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(128, 4, 512, dropout=0.1, batch_first=True).to("tpu")
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-3, fused=True)
    x = torch.randn(8, 64, 128).to("tpu")

    def step():
        loss = layer(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step


def race(steps, rounds):
    """{name: median ms} of steps run in alternation, each (step, backend)."""
    times = {name: [] for name in steps}
    for r in range(rounds + 3):
        for name, (step, backend) in steps.items():
            with sdpa_kernel([backend]):
                t0 = time.perf_counter()
                step().sum().item()  # waits for the device
                if r >= 3:  # (warm-up: compilation)
                    times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=25)
    args = parser.parse_args()
    print("| workload | math path (ms) | fused (ms) | fused speed-up | torch CPU (ms) |")
    print("|---|---:|---:|---:|---:|")
    for shape in ((8, 4, 64, 32), (4, 8, 256, 64), (2, 8, 1024, 64)):
        steps = {name: (attention_step("tpu", shape), backend) for name, backend in PATHS.items()}
        steps["cpu"] = (attention_step("cpu", shape), SDPBackend.MATH)
        t = race(steps, args.rounds)
        label = f"causal SDPA fwd+bwd {'x'.join(map(str, shape))}"
        print(f"| {label} | {t['math path']:.2f} | {t['fused']:.2f} | {t['math path'] / t['fused']:.2f}x | {t['cpu']:.2f} |")
    shape = (8, 4, 64, 32)
    steps = {name: (attention_step("tpu", shape, 0.1), backend) for name, backend in PATHS.items()}
    steps["cpu"] = (attention_step("cpu", shape, 0.1), SDPBackend.MATH)
    t = race(steps, args.rounds)
    label = f"causal SDPA fwd+bwd {'x'.join(map(str, shape))}, dropout 0.1"
    print(f"| {label} | {t['math path']:.2f} | {t['fused']:.2f} | {t['math path'] / t['fused']:.2f}x | {t['cpu']:.2f} |")
    t = race({name: (encoder_step(), backend) for name, backend in PATHS.items()}, args.rounds)
    label = "TransformerEncoderLayer (dropout 0.1) training step, eager"
    print(f"| {label} | {t['math path']:.1f} | {t['fused']:.1f} | {t['math path'] / t['fused']:.2f}x | - |")
    for compiled in (False, True):
        steps = {name: (gpt_step(compiled), backend) for name, backend in PATHS.items()}
        t = race(steps, args.rounds)
        label = "GPT training step, " + ("torch.compile" if compiled else "eager")
        print(f"| {label} | {t['math path']:.1f} | {t['fused']:.1f} | {t['math path'] / t['fused']:.2f}x | - |")


if __name__ == "__main__":
    main()
