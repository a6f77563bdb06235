"""`make demo` / `python -m torchtpu.demo`: train a small GPT on `tpu` in eager
mode and print a short report, with the same run on the CPU as reference.

Options: --steps N, --batch B, --seq T, --no-reference."""

import argparse
import platform
import time

import torch

import torchtpu
from torchtpu.models import GPT


def train(device, steps, batch, seq, vocab, seed=0):
    torch.manual_seed(seed)
    model = GPT(vocab=vocab, d_model=64, n_heads=4, n_layers=2, max_len=seq).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    gen = torch.Generator().manual_seed(seed + 1)
    # A learnable stream: each token is the previous one plus one (mod vocab).
    start = torch.randint(0, vocab, (steps, batch, 1), generator=gen)
    stream = (start + torch.arange(seq + 1)) % vocab
    losses, times = [], []
    for step in range(steps):
        t0 = time.perf_counter()
        idx = stream[step, :, :-1].to(device)
        tgt = stream[step, :, 1:].to(device)
        loss = model.loss(idx, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())  # .item() waits for the step, like CUDA
        times.append(time.perf_counter() - t0)
    return losses, times, sum(p.numel() for p in model.parameters())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=128)
    parser.add_argument("--no-reference", action="store_true", help="skip the CPU reference run")
    args = parser.parse_args(argv)

    from torchtpu.runtime import devices

    torch.tpu._lazy_init()
    jax_dev = devices.jax_device(0)
    print(f"torchtpu {torchtpu.__version__} | torch {torch.__version__} | python {platform.python_version()}")
    print(f"device tpu:0 -> JAX {jax_dev.platform} device '{jax_dev.device_kind}' ({torch.tpu.device_count()} visible)")

    torchtpu.reset_fallback_counts()
    losses, times, n_params = train("tpu", args.steps, args.batch, args.seq, args.vocab)
    stats = torchtpu.kernel_cache_stats()
    steady = sorted(times[2:])[len(times[2:]) // 2] if len(times) > 2 else times[-1]
    tokens = args.batch * args.seq
    print(f"\nGPT: {n_params:,} parameters, batch {args.batch} x seq {args.seq}, AdamW, eager mode")
    print(f"{'step':>6} {'loss (tpu)':>12}")
    for i in range(0, args.steps, max(1, args.steps // 5)):
        print(f"{i:>6} {losses[i]:>12.4f}")
    print(f"{args.steps - 1:>6} {losses[-1]:>12.4f}")
    print(f"\nfirst step (kernel compilation): {times[0]:.2f} s")
    print(f"steady step (median):            {steady * 1e3:.1f} ms  ({tokens / steady:,.0f} tokens/s)")
    calls = stats["fast_hits"] + stats["fast_misses"]
    print(f"eager kernels compiled: {stats['compiles']}, op calls: {calls} ({stats['fast_hits']} served from the C++ cache)")
    print(f"peak tpu memory allocated: {torch.tpu.max_memory_allocated() / 2**20:.1f} MiB")
    fallbacks = torchtpu.fallback_counts()
    print(f"ops that fell back to the CPU: {fallbacks if fallbacks else 'none'}")

    ok = losses[-1] < losses[0]
    if not args.no_reference:
        ref, ref_times, _ = train("cpu", args.steps, args.batch, args.seq, args.vocab)
        dev = max(abs(a - b) for a, b in zip(losses, ref))
        ref_steady = sorted(ref_times[2:])[len(ref_times[2:]) // 2] if len(ref_times) > 2 else ref_times[-1]
        print(f"\nCPU reference: final loss {ref[-1]:.4f}, max |loss_tpu - loss_cpu| = {dev:.2e}, "
              f"steady step {ref_steady * 1e3:.1f} ms")
        ok = ok and dev < 1e-3
    print("\nresult:", "OK" if ok and not fallbacks else "CHECK")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
