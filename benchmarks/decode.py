"""Greedy decoding with a static KV cache, Meta's Llama reference style:

    python benchmarks/decode.py [--tokens 48]

`forward(tokens, start_pos)` writes the cache at `start_pos`, reads it up to
`start_pos + n` and slices a position table at `start_pos`: the Python int
changes every step.  Each mode runs in a fresh process with an empty
compilation cache and reports the whole generation's wall time (compilation
included), its compilations, and the median time per token over the last
20 tokens (all in one bucket: steady state).

Modes: torchtpu compiled (plain `torch.compile`: dynamo makes `start_pos`
symbolic at its second value), the same with `dynamic=True`, torchtpu
eager, a hand-written `jax.jit` decode step (the cache donated, attention
over the whole cache with a mask: one executable), and torch CPU eager."""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TORCHTPU_PLATFORM", "cpu")

VOCAB, DIM, HEADS, LAYERS, MAX_LEN, BATCH, PROMPT = 256, 128, 4, 2, 128, 4, 8


def _torch_model():
    import torch
    import torch.nn.functional as F
    from torch import nn

    head_dim = DIM // HEADS

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv, self.out = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
            self.up, self.down = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)
            self.register_buffer("cache_k", torch.zeros(BATCH, MAX_LEN, HEADS, head_dim))
            self.register_buffer("cache_v", torch.zeros(BATCH, MAX_LEN, HEADS, head_dim))

        def forward(self, x, start_pos):
            b, n, _ = x.shape
            q, k, v = self.qkv(F.layer_norm(x, (DIM,))).view(b, n, 3, HEADS, head_dim).unbind(2)
            self.cache_k[:, start_pos : start_pos + n] = k
            self.cache_v[:, start_pos : start_pos + n] = v
            keys, values = self.cache_k[:, : start_pos + n], self.cache_v[:, : start_pos + n]
            scores = q.transpose(1, 2) @ keys.permute(0, 2, 3, 1) / math.sqrt(head_dim)
            if n > 1:
                mask = torch.full((n, n), float("-inf"), device=x.device).triu(1)
                scores = scores + torch.hstack([torch.zeros((n, start_pos), device=x.device), mask])
            y = (scores.softmax(-1) @ values.transpose(1, 2)).transpose(1, 2).reshape(b, n, DIM)
            x = x + self.out(y)
            return x + self.down(F.gelu(self.up(F.layer_norm(x, (DIM,)))))

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, DIM)
            self.positions = nn.Parameter(torch.randn(MAX_LEN, DIM) * 0.02)
            self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
            self.head = nn.Linear(DIM, VOCAB)

        def forward(self, tokens, start_pos):
            x = self.embed(tokens) + self.positions[start_pos : start_pos + tokens.shape[1]]
            for layer in self.layers:
                x = layer(x, start_pos)
            return self.head(F.layer_norm(x[:, -1], (DIM,)))

    torch.manual_seed(0)
    return Decoder().eval()


def _prompt():
    import torch

    return torch.randint(0, VOCAB, (BATCH, PROMPT), generator=torch.Generator().manual_seed(1))


def run_torch(mode, tokens):
    import torch

    import torchtpu

    model, prompt = _torch_model(), _prompt()
    device = "cpu" if mode == "cpu_eager" else "tpu"
    model, prompt = model.to(device), prompt.to(device)
    step = model
    if mode == "tpu_compiled":
        step = torch.compile(model, backend="tpu")
    elif mode == "tpu_compiled_dynamic":
        step = torch.compile(model, backend="tpu", dynamic=True)
    sync = torch.tpu.synchronize if device == "tpu" else (lambda: None)
    times, out = [], []
    start = time.perf_counter()
    with torch.no_grad():
        logits = step(prompt, 0)
        for pos in range(PROMPT, PROMPT + tokens):
            t0 = time.perf_counter()
            token = logits.argmax(-1, keepdim=True)
            out.append(token)
            logits = step(token, pos)
            sync()
            times.append(time.perf_counter() - t0)
    total = time.perf_counter() - start
    compilations = torchtpu.compile_stats()["compilations"] if mode.startswith("tpu_compiled") else None
    return total, times, compilations, torch.cat(out, 1).cpu().tolist()


def run_jax(tokens):
    import jax
    import jax.numpy as jnp
    import numpy as np

    model, prompt = _torch_model(), _prompt()
    params = {k: jnp.asarray(v.numpy()) for k, v in model.state_dict().items() if "cache" not in k}
    head_dim = DIM // HEADS

    def ln(x):
        mean = x.mean(-1, keepdims=True)
        return (x - mean) / jnp.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-5)

    def forward(p, caches, tokens, start_pos):
        def lin(x, name):
            return x @ p[name + ".weight"].T + p[name + ".bias"]

        b, n = tokens.shape
        x = p["embed.weight"][tokens] + jax.lax.dynamic_slice_in_dim(p["positions"], start_pos, n)
        new_caches = []
        valid = jnp.arange(MAX_LEN)[None, :] <= start_pos + jnp.arange(n)[:, None]  # (n, MAX_LEN)
        for i, (ck, cv) in enumerate(caches):
            name = f"layers.{i}"
            q, k, v = jnp.split(lin(ln(x), name + ".qkv").reshape(b, n, 3, HEADS, head_dim), 3, axis=2)
            q, k, v = q[:, :, 0], k[:, :, 0], v[:, :, 0]
            ck = jax.lax.dynamic_update_slice_in_dim(ck, k, start_pos, axis=1)
            cv = jax.lax.dynamic_update_slice_in_dim(cv, v, start_pos, axis=1)
            scores = jnp.einsum("bnhd,bmhd->bhnm", q, ck) / math.sqrt(head_dim)
            scores = jnp.where(valid, scores, -jnp.inf)
            y = jnp.einsum("bhnm,bmhd->bnhd", jax.nn.softmax(scores, -1), cv).reshape(b, n, DIM)
            x = x + lin(y, name + ".out")
            x = x + lin(jax.nn.gelu(lin(ln(x), name + ".up"), approximate=False), name + ".down")
            new_caches.append((ck, cv))
        return lin(ln(x[:, -1]), "head"), new_caches

    step = jax.jit(forward, donate_argnums=(1,))
    shape = (BATCH, MAX_LEN, HEADS, head_dim)
    caches = [(jnp.zeros(shape, jnp.float32), jnp.zeros(shape, jnp.float32)) for _ in range(LAYERS)]
    times, out = [], []
    start = time.perf_counter()
    logits, caches = step(params, caches, jnp.asarray(prompt.numpy()), 0)
    for pos in range(PROMPT, PROMPT + tokens):
        t0 = time.perf_counter()
        token = jnp.argmax(logits, -1)[:, None]
        out.append(token)
        logits, caches = step(params, caches, token, pos)
        logits.block_until_ready()
        times.append(time.perf_counter() - t0)
    total = time.perf_counter() - start
    return total, times, 2, np.concatenate([np.asarray(t) for t in out], 1).tolist()


def worker(mode, tokens):
    total, times, compilations, generated = run_jax(tokens) if mode == "jax" else run_torch(mode, tokens)
    steady = statistics.median(times[-20:])
    print("RESULT " + json.dumps(dict(total=total, steady=steady, compilations=compilations, tokens=generated)))


MODES = ["tpu_compiled", "tpu_compiled_dynamic", "tpu_eager", "jax", "cpu_eager"]
LABELS = {
    "tpu_compiled": "torchtpu compiled",
    "tpu_compiled_dynamic": "torchtpu compiled, dynamic=True",
    "tpu_eager": "torchtpu eager",
    "jax": "hand-written jax.jit",
    "cpu_eager": "torch CPU eager",
}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--worker")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.tokens)
        return
    print(f"\n### Greedy decoding, static KV cache ({LAYERS} layers, d={DIM}, batch {BATCH}, prompt {PROMPT}, "
          f"{args.tokens} tokens, cache {MAX_LEN})\n")
    print("| mode | whole generation (s) | compilations | steady ms/token | same tokens as CPU |")
    print("|---|---:|---:|---:|---|")
    results = {}
    for mode in reversed(MODES):  # (CPU first: the reference tokens)
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, TORCHTPU_COMPILE_CACHE_DIR=os.path.join(cache, "xla"))
            cmd = [sys.executable, __file__, "--worker", mode, "--tokens", str(args.tokens)]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
            lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
            if not lines:
                raise RuntimeError(f"{mode} failed:\n{out.stderr[-4000:]}")
            results[mode] = json.loads(lines[0][len("RESULT "):])
    for mode in MODES:
        r = results[mode]
        same = "yes" if r["tokens"] == results["cpu_eager"]["tokens"] else "no"
        compilations = "-" if r["compilations"] is None else r["compilations"]
        print(f"| {LABELS[mode]} | {r['total']:.2f} | {compilations} | {r['steady'] * 1e3:.2f} | {same} |")


if __name__ == "__main__":
    main()
