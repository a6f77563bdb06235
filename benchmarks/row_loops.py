"""Loops over the rows of a tensor already on the device: what a first pass
and a second pass cost, and how many kernels or graphs they compile.

    python benchmarks/row_loops.py [--rows 100]

- eager: `torch.tanh(X[i] @ W + b).sum()` for each row block X[i] (32x64),
  one host read per row at the end of the pass;
- eager, batch-first steps: `out[:, t] = torch.tanh(S[:, t] @ W)` for each
  step t of a (32, rows, 64) sequence (an inner dim);
- `.item()`: `x[i, 3, 5].item()` for each row;
- a token loop as Meta's Llama generation writes it: read
  `tokens[:, prev:cur]`, write `tokens[:, cur]` of a (32, rows) buffer (the
  buffer's minor dim);
- compiled training: an MLP under torch.compile(backend="tpu") trained on
  batches sliced from device tensors (`model(X[i])`, `mse_loss(.., Y[i])`),
  SGD step eager.

Each row of the table is a pass over all rows (milliseconds), torch CPU for
reference.  Run it on two commits to compare them: the first pass is where
compilation per offset shows."""

import argparse
import os
import time

os.environ.setdefault("TORCHTPU_PLATFORM", "cpu")

import torch  # noqa: E402

import torchtpu  # noqa: E402
from torchtpu.ops import dispatch  # noqa: E402


def eager_pass(x, w, b):
    outs = [torch.tanh(x[i] @ w + b).sum() for i in range(x.shape[0])]
    return torch.stack(outs).sum().item()


def step_pass(s, w, out):
    for t in range(s.shape[1]):
        out[:, t] = torch.tanh(s[:, t] @ w)
    return out.sum().item()


def item_pass(x):
    return [x[i, 3, 5].item() for i in range(x.shape[0])]


def token_pass(tokens, table):
    for cur in range(1, tokens.shape[1]):
        picked = table[tokens[:, cur - 1 : cur]].sum((1, 2))
        tokens[:, cur] = picked.long().remainder(table.shape[0])
    return tokens[:, -1].sum().item()


def training_pass(model, opt, x, y):
    for i in range(x.shape[0]):
        loss = torch.nn.functional.mse_loss(model(x[i]), y[i])
        loss.backward()
        opt.step()
        opt.zero_grad()
    return loss.item()


def timed(fn, *args):
    kernels, graphs = dispatch.stats["compiles"], torchtpu.compile_stats()["compilations"]
    t0 = time.perf_counter()
    fn(*args)
    ms = (time.perf_counter() - t0) * 1e3
    return ms, dispatch.stats["compiles"] - kernels, torchtpu.compile_stats()["compilations"] - graphs


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=100)
    n = parser.parse_args().rows
    torch.manual_seed(0)
    data = {"x": torch.randn(n, 32, 64), "w": torch.randn(64, 64) / 8, "b": torch.randn(64),
            "y": torch.randn(n, 32, 4), "s": torch.randn(32, n, 64),
            "tokens": torch.randint(0, 50, (32, n)), "table": torch.randn(50, 8) * 10}
    print(f"{n} rows; ms per pass over all rows (kernels / graphs compiled in the pass)\n")
    print("| loop | pass | torchtpu (ms) | compiled | torch CPU (ms) |")
    print("|---|---|---:|---:|---:|")
    for name, make in (
        ("eager `tanh(X[i] @ W + b).sum()`", lambda d, dev: (eager_pass, d["x"].to(dev), d["w"].to(dev), d["b"].to(dev))),
        ("eager `out[:, t] = tanh(S[:, t] @ W)`",
         lambda d, dev: (step_pass, d["s"].to(dev), d["w"].to(dev), torch.zeros(32, n, 64, device=dev))),
        ("`x[i, 3, 5].item()`", lambda d, dev: (item_pass, d["x"].to(dev))),
        ("eager token loop `tokens[:, cur] = f(tokens[:, prev:cur])`",
         lambda d, dev: (token_pass, d["tokens"].to(dev), d["table"].to(dev))),
        ("compiled MLP training on `X[i]`", make_training),
    ):
        tpu, cpu = make(data, "tpu"), make(data, "cpu")
        for label in ("first", "second"):
            ms, kernels, graphs = timed(*tpu)
            cpu_ms = timed(*cpu)[0]
            print(f"| {name} | {label} | {ms:.1f} | {kernels} kernels, {graphs} graphs | {cpu_ms:.1f} |")


def make_training(data, device):
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if device == "tpu":
        model = torch.compile(model, backend="tpu")
    return training_pass, model, opt, data["x"].to(device), data["y"].to(device)


if __name__ == "__main__":
    main()
