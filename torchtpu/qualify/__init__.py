"""`torchtpu qualify`: prove that a model runs on this backend revision.

The model runs three times from the same initial weights -- on the CPU
(the reference), on `tpu` eager and on `tpu` under
`torch.compile(backend="tpu")` -- for forward, backward and N optimizer
steps, and the report states per mode which aten ops ran and how (lowered or
CPU fallback), how far outputs, losses and gradients are from the reference
(PASS/FAIL against rtol/atol), warm-up and steady-step times, peak device
memory, graph breaks and recompilations, and the exact revision qualified.
When eager mode fails, the eager run is replayed op by op against the CPU to
name the first op that deviates.

Modules: cli (arguments, exit codes), workload (the model factory and the
built-in models), runner (one mode's run), ops (which ops ran and how),
compare (deviations), replay (pinpointing), revision, report (terminal,
markdown, JSON), plot.
"""

from .cli import main  # noqa: F401
