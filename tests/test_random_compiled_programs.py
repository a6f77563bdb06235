"""Randomized programs under torch.compile(backend="tpu"), against CPU eager.

Each seed fixes a program from test_random_programs.py's op table (views,
in-place writes into the inputs, promotion, reductions, autograd), replayed
inside one compiled function.  Every other op is followed by an `.item()`,
which graph-breaks and runs eagerly: so the programs check graphs split at
random points and the eager code between them, where dynamo's frame hook is
still set while our kernels run (runtime/outside_dynamo.py)."""

import random

import pytest
import torch

import test_random_programs as programs


class _Recorder:
    """random.Random's methods the op table uses, recording what they return."""

    def __init__(self, rng):
        self.rng = rng
        self.values = []

    def _record(self, value):
        self.values.append(value)
        return value

    def choice(self, seq):
        return self._record(self.rng.choice(seq))

    def random(self):
        return self._record(self.rng.random())

    def randrange(self, n):
        return self._record(self.rng.randrange(n))

    def sample(self, population, k):
        return self._record(self.rng.sample(population, k))


class _Replay:
    """The recorded draws again, in order (plain values dynamo can trace)."""

    def __init__(self, values):
        self.values = values
        self.next = 0

    def _draw(self, *args):
        value = self.values[self.next]
        self.next += 1
        return value

    choice = random = randrange = sample = _draw


def _trace(seed, steps, autograd):
    """(input tensors, [(op name, argument indices, recorded draws)]) of a
    program whose ops all succeed on the CPU."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    inputs = []
    for k in range(3):
        base = torch.randn(rng.choice(programs.SHAPES), generator=gen)
        if k == 2 and not autograd:
            base = (base * 3).to(programs.INT_DTYPES[seed % len(programs.INT_DTYPES)])
        inputs.append(base)
    pool = [t.clone().requires_grad_(autograd) * 1 if autograd else t.clone() for t in inputs]
    ops = _ops(autograd)
    names = sorted(ops)
    trace = []
    for _ in range(steps):
        name = rng.choice(names)
        i = rng.randrange(len(pool))
        if name in programs.FLOAT_ONLY and not pool[i].dtype.is_floating_point:
            continue
        args = [i]
        if name in programs.BINARY:
            fits = [k for k, t in enumerate(pool) if programs._broadcasts_to(t.shape, pool[i].shape)]
            args.append(rng.choice(fits) if fits and rng.random() < 0.8 else rng.randrange(len(pool)))
        recorder = _Recorder(random.Random(rng.random()))
        try:
            out = ops[name](recorder, *[pool[k] for k in args])
        except (RuntimeError, IndexError, ValueError):
            continue
        trace.append((name, args, recorder.values))
        pool.append(out)
    return inputs, trace


def _ops(autograd):
    binary = {k: v for k, v in programs.BINARY.items() if not (autograd and k in programs.INPLACE)}
    return {**programs.UNARY, **binary}


def _replay(trace, ops, inputs, autograd):
    pool = [t * 1 for t in inputs] if autograd else list(inputs)
    for step, (name, args, draws) in enumerate(trace):
        out = ops[name](_Replay(draws), *[pool[k] for k in args])
        if step % 2 and out.numel():
            out.float().sum().item()  # a graph break: eager ops between graphs
        pool.append(out)
    return tuple(pool[len(inputs):])


def _check(seed, steps, autograd):
    inputs, trace = _trace(seed, steps, autograd)
    ops = _ops(autograd)
    cpu_in = [t.clone().requires_grad_(autograd) for t in inputs]
    tpu_in = [t.to("tpu").requires_grad_(autograd) for t in inputs]

    def program(*xs):
        return _replay(trace, ops, xs, autograd)

    torch._dynamo.reset()
    cpu_out = program(*cpu_in)
    tpu_out = torch.compile(program, backend="tpu")(*tpu_in)
    where = f"seed {seed}: {[t[:2] for t in trace]}"
    assert len(cpu_out) == len(tpu_out), where
    for k, (c, t) in enumerate(zip(cpu_out, tpu_out)):
        programs._compare(c, t, f"{where}, output {k}")
    for k, (c, t) in enumerate(zip(cpu_in, tpu_in)):  # in-place writes into the inputs
        programs._compare(c, t, f"{where}, input {k} afterwards")
    if autograd:
        weights = [i + 1.0 for i in range(len(cpu_out))]
        cpu_loss = sum(w * o.float().sum() for w, o in zip(weights, cpu_out) if o.requires_grad)
        tpu_loss = sum(w * o.float().sum() for w, o in zip(weights, tpu_out) if o.requires_grad)
        if isinstance(cpu_loss, torch.Tensor):
            cpu_loss.backward()
            tpu_loss.backward()
            for k, (c, t) in enumerate(zip(cpu_in, tpu_in)):
                if c.grad is not None:
                    programs._compare(c.grad, t.grad, f"{where}, gradient of input {k}")


@pytest.mark.parametrize("seed", range(8))
def test_compiled_random_program_matches_cpu(seed, no_fallback):
    _check(seed, steps=10, autograd=False)


@pytest.mark.parametrize("seed", range(100, 104))
def test_compiled_random_program_gradients_match_cpu(seed, no_fallback):
    _check(seed, steps=8, autograd=True)
