"""The exact revision qualified: torchtpu (version and git commit), torch,
jax, jaxlib, Python, platform and device kind, and the settings that change
what XLA does (XLA/libtpu flags, JAX and torchtpu environment, matmul
precision)."""

import os
import platform
import subprocess

import torch


def _git_commit(path):
    def git(*args):
        return subprocess.run(["git", "-C", path, *args], capture_output=True, text=True, timeout=10)

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return "unknown (not a git checkout)"
        commit = head.stdout.strip()
        dirty = git("status", "--porcelain", "--untracked-files=no")
        return commit + ("+local-changes" if dirty.returncode == 0 and dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown (git not available)"


def collect(device="tpu") -> dict:
    import jax
    import jaxlib

    import torchtpu
    from torchtpu.runtime import devices

    dev = torch.device(device)
    jax_dev = devices.jax_device(dev.index if dev.index is not None else torch.tpu.current_device())
    env = {k: v for k, v in sorted(os.environ.items()) if k.startswith(("XLA_", "LIBTPU", "JAX_", "TPU_", "TORCHTPU_"))}
    return {
        "torchtpu": torchtpu.__version__,
        "torchtpu_commit": _git_commit(os.path.dirname(os.path.realpath(torchtpu.__file__))),
        "torch": torch.__version__,
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "python": platform.python_version(),
        "platform": jax_dev.platform,
        "device_kind": jax_dev.device_kind,
        "device_count": torch.tpu.device_count(),
        "host": platform.platform(),
        "xla_flags": os.environ.get("XLA_FLAGS", "") or "(none)",
        "libtpu_init_args": os.environ.get("LIBTPU_INIT_ARGS", "") or "(none)",
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "environment": env,
    }
