"""The caching allocator: allocation+free round trips against torch's CPU
allocator, and fragmentation (reserved / allocated) at the peak of GPT
training steps.

    python benchmarks/memory.py [--markdown]

Round trips are measured two ways:
- in C++ (`torchtpu._C._bench_allocator_roundtrip`): the allocator's own
  allocate + free + release path (lock, pool search, split/merge, statistics)
  against `c10::GetCPUAllocator()` allocate + free, nanoseconds per pair;
- from Python: `torch.empty(n, device=...)` then `del`, what a user sees
  (PyTorch's dispatch and TensorImpl included); for tpu the free takes effect
  at the next drain (before every op), which is included.
Each number is the median of 7 rounds.

Fragmentation: a few warm-up steps, then `empty_cache()` and
`reset_peak_memory_stats()`, then one training step; max_memory_reserved()
over max_memory_allocated() (CUDA typically shows 1.0-1.3x)."""

import argparse
import os
import statistics
import time

os.environ.setdefault("TORCHTPU_PLATFORM", "cpu")

import torch  # noqa: E402

import torchtpu  # noqa: E402
from torchtpu import _C  # noqa: E402
from torchtpu.models import GPT  # noqa: E402
from torchtpu.runtime import boxes  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
SIZES = [("512 B", 512), ("4 KiB", 4 * KiB), ("256 KiB", 256 * KiB), ("4 MiB", 4 * MiB), ("64 MiB", 64 * MiB)]


def cpp_roundtrip(nbytes, iterations=20000, rounds=7):
    samples = [_C._bench_allocator_roundtrip(nbytes, iterations) for _ in range(rounds)]
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


def python_roundtrip(nbytes, device, iterations=3000, rounds=7):
    drain = boxes.drain if device.type == "tpu" else (lambda: None)
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(iterations):
            t = torch.empty(nbytes, dtype=torch.uint8, device=device)
            del t
            drain()
        out.append((time.perf_counter() - t0) / iterations * 1e6)
    return statistics.median(out)


def gpt_peak(vocab, d_model, n_heads, n_layers, batch, seq):
    torch.manual_seed(0)
    tpu = torch.device("tpu", 0)
    model = GPT(vocab=vocab, d_model=d_model, n_heads=n_heads, n_layers=n_layers, max_len=seq).to(tpu)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, vocab, (batch, seq), generator=g).to(tpu)
    tgt = torch.randint(0, vocab, (batch, seq), generator=g).to(tpu)

    def step():
        loss = model.loss(idx, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    for _ in range(3):
        step().item()
    boxes.drain()
    torch.tpu.empty_cache()
    torch.tpu.reset_peak_memory_stats()
    step().item()
    boxes.drain()
    allocated = torch.tpu.max_memory_allocated()
    reserved = torch.tpu.max_memory_reserved()
    steady_alloc, steady_res = torch.tpu.memory_allocated(), torch.tpu.memory_reserved()
    params = sum(p.numel() for p in model.parameters())
    del model, opt, idx, tgt
    boxes.drain()
    torch.tpu.empty_cache()
    return params, allocated, reserved, steady_alloc, steady_res


GPTS = [
    ("GPT 2 layers, d=128, batch 8x64 (docs/performance.md's step)", (256, 128, 4, 2, 8, 64)),
    ("GPT 4 layers, d=256, batch 16x128", (512, 256, 8, 4, 16, 128)),
    ("GPT 6 layers, d=512, batch 8x256", (1024, 512, 8, 6, 8, 256)),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--quick", action="store_true", help="skip the largest GPT")
    args = parser.parse_args()
    cpu, tpu = torch.device("cpu"), torch.device("tpu", 0)

    rows = []
    for name, n in SIZES:
        tpu_ns, cpu_ns = cpp_roundtrip(n, iterations=2000 if n >= 4 * MiB else 20000)
        py_tpu = python_roundtrip(n, tpu)
        py_cpu = python_roundtrip(n, cpu, iterations=300 if n >= 4 * MiB else 3000)
        rows.append((name, tpu_ns / 1000, cpu_ns / 1000, py_tpu, py_cpu))

    gpts = []
    for name, cfg in GPTS[:2] if args.quick else GPTS:
        gpts.append((name,) + gpt_peak(*cfg))

    if args.markdown:
        print("| size | tpu allocator, C++ (us) | torch CPU allocator, C++ (us) | torch.empty+del tpu (us) | torch.empty+del CPU (us) |")
        print("|---|---:|---:|---:|---:|")
        for name, a, b, c, d in rows:
            print(f"| {name} | {a:.3f} | {b:.3f} | {c:.2f} | {d:.2f} |")
        print()
        print("| training step | params | peak allocated (MiB) | peak reserved (MiB) | reserved / allocated | steady allocated / reserved (MiB) |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, params, alloc, res, s_alloc, s_res in gpts:
            print(f"| {name} | {params / 1e6:.2f} M | {alloc / MiB:.2f} | {res / MiB:.2f} | {res / alloc:.3f}x | "
                  f"{s_alloc / MiB:.2f} / {s_res / MiB:.2f} |")
    else:
        for name, a, b, c, d in rows:
            print(f"{name:>8}: C++ tpu {a:.3f} us, cpu {b:.3f} us; Python tpu {c:.2f} us, cpu {d:.2f} us")
        for name, params, alloc, res, s_alloc, s_res in gpts:
            print(f"{name}: {params / 1e6:.2f}M params, peak allocated {alloc / MiB:.2f} MiB, "
                  f"peak reserved {res / MiB:.2f} MiB, ratio {res / alloc:.3f}")


if __name__ == "__main__":
    main()
