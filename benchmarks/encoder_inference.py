"""nn.TransformerEncoder inference with a padding mask: the nested-tensor path
PyTorch takes by default (`enable_nested_tensor=True`; ops/nested.py on tpu)
against the padded one (`enable_nested_tensor=False`), side by side in one
process so that machine noise hits both alike:

    python benchmarks/encoder_inference.py [--rounds 25]

2 layers, d=128, 4 heads, batch 8x64, each row's length drawn in 16..64 (a
new draw every call: the nested path must not compile per batch).  Eval mode
and no_grad, as PyTorch requires for its fast path.  Milliseconds per call,
the median of the rounds (a call ends with a host read of its output);
torch CPU for reference."""

import argparse
import os
import statistics
import time

os.environ.setdefault("TORCHTPU_PLATFORM", "cpu")

import torch  # noqa: E402
from torch import nn  # noqa: E402

import torchtpu  # noqa: E402

BATCH, LENGTH, WIDTH = 8, 64, 128


def encoder(nested, device):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(WIDTH, 4, 4 * WIDTH, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=nested).eval().to(device)


def call(model, device, generator):
    x = torch.randn(BATCH, LENGTH, WIDTH, generator=generator).to(device)
    lengths = torch.randint(16, LENGTH + 1, (BATCH,), generator=generator)
    padding = (torch.arange(LENGTH)[None] >= lengths[:, None]).to(device)

    def run():
        with torch.no_grad():
            return model(x, src_key_padding_mask=padding).sum().item()

    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=25)
    rounds = parser.parse_args().rounds
    rows = {(nested, device): encoder(nested, device) for device in ("tpu", "cpu") for nested in (True, False)}
    times = {key: [] for key in rows}
    generator = torch.Generator().manual_seed(1)
    compiles = None
    for r in range(rounds + 3):
        for key, model in rows.items():
            run = call(model, key[1], generator)
            t0 = time.perf_counter()
            run()
            if r >= 3:  # (warm-up: compilation)
                times[key].append(time.perf_counter() - t0)
        if r == 2:
            compiles = torchtpu.kernel_cache_stats()["compiles"]
    ms = {key: statistics.median(t) * 1e3 for key, t in times.items()}
    print("| path | torchtpu (ms) | torch CPU (ms) |")
    print("|---|---:|---:|")
    for nested, label in ((True, "nested (default)"), (False, "padded (enable_nested_tensor=False)")):
        print(f"| {label} | {ms[(nested, 'tpu')]:.2f} | {ms[(nested, 'cpu')]:.2f} |")
    print(f"\neager kernels compiled after warm-up, over {rounds} rounds of new lengths: "
          f"{torchtpu.kernel_cache_stats()['compiles'] - compiles}")


if __name__ == "__main__":
    main()
