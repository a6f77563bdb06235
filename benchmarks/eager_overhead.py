"""Eager per-op overhead: torchtpu vs a raw jax.jit of the same op on the same
arrays vs torch on the CPU; plus one eager GPT training step.

    python benchmarks/eager_overhead.py [--markdown]

torchtpu dispatch is asynchronous (like CUDA), so each row times N calls
followed by one synchronize; the raw JAX row does the same with
block_until_ready.  Numbers are microseconds per op: the median of 15
rounds in which the three variants run alternately (this 2-core machine is
noisy; alternation keeps the comparison fair)."""

import argparse
import os
import statistics
import time

os.environ.setdefault("TORCHTPU_PLATFORM", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402

import torchtpu  # noqa: E402,F401
from torchtpu.ops.transfer import materialize  # noqa: E402


def timeit_interleaved(candidates, n, repeats=15):
    """Median microseconds per call of each (fn, sync), measured in
    alternation so that machine noise hits every candidate alike."""
    for fn, sync in candidates:
        fn()
        sync()
    samples = [[] for _ in candidates]
    for _ in range(repeats):
        for (fn, sync), out in zip(candidates, samples):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            sync()
            out.append((time.perf_counter() - t0) / n * 1e6)
    return [statistics.median(s) for s in samples]


def rows():
    g = torch.Generator().manual_seed(0)
    small = torch.randn(32, 32, generator=g)
    m64 = torch.randn(64, 64, generator=g)
    m512 = torch.randn(512, 512, generator=g)
    vec = torch.randn(4096, generator=g)
    att = torch.randn(8, 128, 128, generator=g)
    return [
        ("add 32x32", lambda a: a + a, lambda a: a + a, small, 2000),
        ("mul by scalar 32x32", lambda a: a * 0.5, lambda a: a * 0.5, small, 2000),
        ("mm 64x64", lambda a: a @ a, lambda a: jnp.matmul(a, a, precision="highest"), m64, 1000),
        ("mm 512x512", lambda a: a @ a, lambda a: jnp.matmul(a, a, precision="highest"), m512, 50),
        ("sum 4096", lambda a: a.sum(), lambda a: a.sum(), vec, 2000),
        ("softmax 8x128x128", lambda a: a.softmax(-1), lambda a: jax.nn.softmax(a, -1), att, 300),
        ("relu_ in place 32x32", lambda a: a.relu_(), lambda a: jax.nn.relu(a), small, 2000),
        ("x.t() @ y 64x64", lambda a: a.t() @ a, lambda a: jnp.matmul(a.T, a, precision="highest"), m64, 1000),
    ]


def bench_ops():
    results = []
    for name, torch_fn, jax_fn, x, n in rows():
        x_tpu = x.to("tpu")
        arr = materialize(x_tpu)
        jitted = jax.jit(jax_fn)
        last = [arr]
        if "in place" in name:

            def jax_call():
                last[0] = jitted(last[0])

        else:

            def jax_call():
                last[0] = jitted(arr)

        x_cpu = x.clone()
        t_tpu, t_jax, t_cpu = timeit_interleaved(
            [
                (lambda: torch_fn(x_tpu), torch.tpu.synchronize),
                (jax_call, lambda: last[0].block_until_ready()),
                (lambda: torch_fn(x_cpu), lambda: None),
            ],
            n,
        )
        results.append((name, t_tpu, t_jax, t_cpu))
    return results


def bench_gpt_step(steps=10):
    from torchtpu.models import GPT

    out = {}
    for device in ("tpu", "cpu"):
        torch.manual_seed(0)
        model = GPT(vocab=256, d_model=128, n_heads=4, n_layers=2, max_len=64).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        idx = torch.randint(0, 256, (8, 64)).to(device)

        def step():
            loss = model.loss(idx, idx)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss

        for _ in range(3):
            step().item()
        t0 = time.perf_counter()
        for _ in range(steps):
            loss = step()
        loss.item()
        out[device] = (time.perf_counter() - t0) / steps * 1e3
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    results = bench_ops()
    gpt = bench_gpt_step()
    platform = jax.devices()[0].platform
    print(f"Eager overhead, JAX platform: {platform}, torch {torch.__version__}, jax {jax.__version__}\n")
    print("| op | torchtpu eager (us) | raw jax.jit (us) | torch CPU (us) | torchtpu / jax |")
    print("|---|---:|---:|---:|---:|")
    for name, t_tpu, t_jax, t_cpu in results:
        print(f"| {name} | {t_tpu:.1f} | {t_jax:.1f} | {t_cpu:.1f} | {t_tpu / t_jax:.2f}x |")
    print()
    print("| GPT training step (eager, 2 layers, d=128, batch 8x64, AdamW) | ms |")
    print("|---|---:|")
    print(f"| torchtpu eager | {gpt['tpu']:.1f} |")
    print(f"| torch CPU | {gpt['cpu']:.1f} |")


if __name__ == "__main__":
    main()
