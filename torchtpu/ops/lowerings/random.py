"""Random ops driven by the device generator (seed, offset): uniform_, normal_, bernoulli, randint, randperm, ...

Every lowering here is `random=True` and draws from `ctx.rng_key()`.  The streams
are not torch's Philox/mt19937 streams (no backend matches them bit for bit);
what matches torch is each op's range, dtype and distribution:

- floating `uniform_` uses as many random bits as the dtype has mantissa digits
  (k * 2**-digits, so bf16 `uniform_()` is in [0, 1) exactly, as on CPU), scaled
  in float32 (float64 for double);
- `random_()` gives integers in [0, 2**digits] for floating dtypes and
  [0, max] for integer dtypes; `random_(from, to)` is [from, to) by modulo, as
  ATen does;
- everything else draws float32 (float64 for double) and casts.
"""

import math

import jax
import jax.numpy as jnp
import torch
from jax import lax

from ..dtype_names import c10_name, found_dtype_error, kernel_not_implemented
from ..registry import lower, lower_view


aten = torch.ops.aten


def _is_float(dtype):
    return jnp.issubdtype(dtype, jnp.floating)


def _digits(dtype):
    """std::numeric_limits<T>::digits of a floating dtype."""
    return jnp.finfo(dtype).nmant + 1


def _compute(dtype):
    """The type distributions are computed in (ATen's dist_acctype)."""
    return jnp.float64 if jnp.dtype(dtype) == jnp.float64 else jnp.float32


def _check_floating(op_name, dtype):
    """ATen's dispatch error for a kernel with floating types only (a JAX or torch dtype)."""
    if not (dtype.is_floating_point if isinstance(dtype, torch.dtype) else _is_float(dtype)):
        raise kernel_not_implemented(op_name, dtype)


def _unit(key, shape, dtype):
    """Uniform in [0, 1) with `digits(dtype)` random bits (exact in dtype)."""
    digits = _digits(dtype)
    compute = _compute(dtype)
    if digits > 32:
        bits = jax.random.bits(key, shape, jnp.uint64)
        bits = bits & jnp.uint64((1 << digits) - 1)
    else:
        bits = jax.random.bits(key, shape, jnp.uint32)
        bits = bits & jnp.uint32((1 << digits) - 1)
    return bits.astype(compute) * compute(2.0 ** -digits)


def _open_unit(key, shape, dtype):
    """Uniform in (0, 1): never 0, for the log-based samplers."""
    compute = _compute(dtype)
    return jax.random.uniform(key, shape, compute, minval=jnp.finfo(compute).tiny, maxval=1.0)


def _standard_normal(key, shape, dtype):
    return jax.random.normal(key, shape, _compute(dtype))


# ---------------------------------------------------------------- uniform


def _complex_parts(dtype):
    """The real dtype whose pairs make up a complex dtype (view_as_real)."""
    return jnp.float64 if jnp.dtype(dtype) == jnp.complex128 else jnp.float32


def _as_complex(pairs, dtype):
    return lax.complex(pairs[..., 0], pairs[..., 1]).astype(dtype)


@lower(aten.uniform.default, random=True)
def uniform(ctx, self, from_=0.0, to=1.0, generator=None):
    dtype = self.dtype
    if jnp.issubdtype(dtype, jnp.complexfloating):
        # ATen draws the real and imaginary parts independently.
        real = jnp.zeros(self.shape + (2,), _complex_parts(dtype))
        return _as_complex(uniform(ctx, real, from_, to), dtype)
    _check_floating("check_uniform_bounds", dtype)
    info = jnp.finfo(dtype)
    for name, v in (("from", from_), ("to", to)):
        if not (float(info.min) <= v <= float(info.max)):
            raise RuntimeError(f"{name} is out of bounds for {jnp.dtype(dtype).name}")
    if from_ > to:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={from_} > to={to}")
    if to - from_ > float(info.max):
        raise RuntimeError(
            f"uniform_ expects to-from <= std::numeric_limits<{jnp.dtype(dtype).name}>::max(), "
            f"but found to={to} and from={from_} which result in to-from to exceed the limit"
        )
    compute = _compute(dtype)
    u = _unit(ctx.rng_key(), self.shape, dtype)
    return (u * compute(to - from_) + compute(from_)).astype(dtype)


# ----------------------------------------------------------------- normal


def _check_std(std):
    if std < 0.0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")


def _check_std_tensor(ctx, std):
    ctx.check(jnp.all(jnp.asarray(std) >= 0), "normal expects all elements of std >= 0.0")


@lower(aten.normal_.default, aten.normal.out, aten.normal_functional.default, random=True)
def normal_(ctx, self, mean=0.0, std=1.0, generator=None):
    dtype = self.dtype
    if jnp.issubdtype(dtype, jnp.complexfloating):
        # As ATen: both parts ~ N(mean, std / sqrt(2)), so E|z - mean|^2 = std^2.
        _check_std(std)
        real = jnp.zeros(self.shape + (2,), _complex_parts(dtype))
        return _as_complex(normal_(ctx, real, mean, std / math.sqrt(2.0)), dtype)
    _check_floating("normal_kernel_cpu", dtype)
    _check_std(std)
    compute = _compute(dtype)
    z = _standard_normal(ctx.rng_key(), self.shape, dtype)
    return (z * compute(std) + compute(mean)).astype(dtype)


@lower(aten.normal.Tensor_float, random=True)
def normal_tensor_float(ctx, mean, std=1.0, generator=None):
    _check_std(std)
    dtype = ctx.out_dtype
    compute = _compute(dtype)
    z = _standard_normal(ctx.rng_key(), ctx.out_shape, dtype)
    return (z * compute(std) + mean.astype(compute)).astype(dtype)


@lower(aten.normal.float_Tensor, random=True)
def normal_float_tensor(ctx, mean, std, generator=None):
    _check_std_tensor(ctx, std)
    dtype = ctx.out_dtype
    compute = _compute(dtype)
    z = _standard_normal(ctx.rng_key(), ctx.out_shape, dtype)
    return (z * std.astype(compute) + compute(mean)).astype(dtype)


@lower(aten.normal.Tensor_Tensor, random=True)
def normal_tensor_tensor(ctx, mean, std, generator=None):
    _check_std_tensor(ctx, std)
    dtype = ctx.out_dtype
    compute = _compute(dtype)
    z = _standard_normal(ctx.rng_key(), ctx.out_shape, dtype)
    return (z * std.astype(compute) + mean.astype(compute)).astype(dtype)


@lower(aten.normal.float_float, random=True)
@lower(aten.normal.float_float_out, random=True)
def normal_float_float(ctx, mean, std, size, generator=None, *rest):
    _check_std(std)
    dtype = ctx.out_dtype
    compute = _compute(dtype)
    z = _standard_normal(ctx.rng_key(), tuple(size), dtype)
    return (z * compute(std) + compute(mean)).astype(dtype)


@lower(aten.log_normal.default, random=True)
def log_normal(ctx, self, mean=1.0, std=2.0, generator=None):
    dtype = self.dtype
    _check_floating("log_normal_cpu", dtype)
    if std <= 0.0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={std}")
    compute = _compute(dtype)
    z = _standard_normal(ctx.rng_key(), self.shape, dtype)
    return jnp.exp(z * compute(std) + compute(mean)).astype(dtype)


# ------------------------------------------------------ other continuous


@lower(aten.exponential.default, random=True)
def exponential(ctx, self, lambd=1.0, generator=None):
    dtype = self.dtype
    _check_floating("exponential_cpu", dtype)
    if not lambd > 0.0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={lambd}")
    compute = _compute(dtype)
    u = _open_unit(ctx.rng_key(), self.shape, dtype)
    return (-jnp.log(u) / compute(lambd)).astype(dtype)


@lower(aten.cauchy.default, random=True)
def cauchy(ctx, self, median=0.0, sigma=1.0, generator=None):
    dtype = self.dtype
    _check_floating("cauchy_cpu", dtype)
    if not sigma > 0.0:
        raise RuntimeError(f"cauchy_ expects sigma > 0.0, but found sigma={sigma}")
    compute = _compute(dtype)
    u = _open_unit(ctx.rng_key(), self.shape, dtype)
    return (compute(median) + compute(sigma) * jnp.tan(compute(math.pi) * (u - 0.5))).astype(dtype)


@lower(aten.geometric.default, random=True)
def geometric(ctx, self, p, generator=None):
    """Number of Bernoulli(p) trials up to the first success: {1, 2, ...}."""
    if not 0.0 < p < 1.0:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={p}")
    dtype = self.dtype
    u = _open_unit(ctx.rng_key(), self.shape, jnp.float64 if dtype == jnp.float64 else jnp.float32)
    trials = jnp.ceil(jnp.log(u) / jnp.log1p(-p).astype(u.dtype))
    return jnp.maximum(trials, 1).astype(dtype)


@lower(aten.poisson.default, random=True)
def poisson(ctx, self, generator=None):
    dtype = self.dtype
    _check_floating("poisson_cpu", dtype)
    rate = self.astype(_compute(dtype))
    # (NaN fails it too, as on CPU; device-side, like CUDA's assert)
    ctx.check(jnp.all(rate >= 0), "invalid Poisson rate, expected rate to be non-negative")
    return jax.random.poisson(ctx.rng_key(), rate, self.shape, dtype=jnp.int64).astype(dtype)


# ------------------------------------------- gamma, dirichlet, binomial
#
# ATen's CPU kernels run these in double; here float32 (float64 for double),
# and bf16/half (which only CUDA takes) are computed in float32 and cast.


def _standard_gamma_sample(key, alpha, log_space=False):
    """Gamma(alpha, 1) draws for an array of alphas (in log space: their logs).

    ATen's sample_gamma: Marsaglia and Tsang's rejection method, alpha < 1
    boosted to alpha + 1 and scaled by U^(1/alpha).  Vectorised as one loop
    over the whole array (each round draws a candidate everywhere, the
    pending elements take theirs where accepted; each round accepts over 95%
    of them for alpha >= 1), which compiles far faster than
    jax.random.gamma's loop per element.  alpha == 0 gives 0 (log: -inf) as
    in ATen; alpha <= -2/3 (d <= 0) and NaN give NaN, which ATen's sampler
    also yields and its caller's clamp turns into the smallest normal."""
    dtype = alpha.dtype
    boost = alpha < 1
    a = jnp.where(boost, alpha + 1, alpha)
    d = a - jnp.asarray(1 / 3, dtype)
    c = 1 / jnp.sqrt(9 * d)
    valid = d > 0
    loop_key, boost_key = jax.random.split(key)

    def pending(out):
        return valid & jnp.isnan(out)

    def body(state):
        i, out = state
        x_key, u_key = jax.random.split(jax.random.fold_in(loop_key, i))
        x = jax.random.normal(x_key, alpha.shape, dtype)
        u = 1 - jax.random.uniform(u_key, alpha.shape, dtype)  # (0, 1]
        y = 1 + c * x
        v = y * y * y
        xx = x * x
        accept = (y > 0) & ((u < 1 - 0.0331 * xx * xx) | (jnp.log(u) < 0.5 * xx + d * (1 - v + jnp.log(v))))
        value = jnp.log(d) + jnp.log(v) if log_space else d * v
        # (done-ness is read off `out` itself: XLA may evaluate `accept` twice
        # with different roundings, so a separate flag could disagree with it)
        return i + 1, jnp.where(pending(out) & accept, value, out)

    def cond(state):
        i, out = state
        return jnp.any(pending(out)) & (i < 100000)

    _, out = lax.while_loop(cond, body, (jnp.int32(0), jnp.full(alpha.shape, jnp.nan, dtype)))
    u = 1 - jax.random.uniform(boost_key, alpha.shape, dtype)
    if log_space:
        out = jnp.where(boost, out + jnp.log(u) / alpha, out)
        return jnp.where(alpha == 0, jnp.asarray(-jnp.inf, dtype), out)
    out = jnp.where(boost, out * jnp.power(u, 1 / alpha), out)
    return jnp.where(alpha == 0, jnp.asarray(0, dtype), out)


def _at_least_tiny(x, dtype):
    """std::max(numeric_limits<dtype>::min(), x): NaN becomes the minimum too."""
    tiny = jnp.asarray(jnp.finfo(dtype).tiny, dtype)
    return jnp.where(x > tiny, x, tiny)


@lower(aten._standard_gamma.default, random=True)
def standard_gamma(ctx, self, generator=None):
    dtype = self.dtype
    _check_floating("gamma_cpu", dtype)
    sample = _standard_gamma_sample(ctx.rng_key(), self.astype(_compute(dtype)))
    return _at_least_tiny(sample.astype(dtype), dtype)


def _dirichlet_meta(self, generator=None):
    _check_floating("dirichlet", self.dtype)
    return torch.empty_like(self, memory_format=torch.contiguous_format)


@lower(aten._sample_dirichlet.default, random=True, meta=_dirichlet_meta)
def sample_dirichlet(ctx, self, generator=None):
    """Gamma draws normalised along the last dim.  ATen draws the gammas in
    double so that small alphas do not underflow; here they are drawn in log
    space (float32 holds log-gammas far below double's range), each clamped
    below at log(DBL_MIN) as ATen clamps the gammas at DBL_MIN (a row of
    zero alphas gives 1/n each), normalised with a log-sum-exp, and the
    result clamped to [min normal, largest value below 1] of the dtype."""
    dtype = self.dtype
    _check_floating("dirichlet", dtype)
    compute = _compute(dtype)
    alpha = self.astype(compute).reshape(self.shape or (1,))
    log_gamma = _standard_gamma_sample(ctx.rng_key(), alpha, log_space=True)
    floor = jnp.asarray(math.log(jnp.finfo(jnp.float64).tiny), compute)
    log_gamma = jnp.where(log_gamma > floor, log_gamma, floor)  # (NaN too, as std::max)
    log_total = jax.scipy.special.logsumexp(log_gamma, axis=-1, keepdims=True)
    ratio = jnp.exp(log_gamma - log_total).astype(dtype).reshape(self.shape)
    below_one = jnp.nextafter(jnp.asarray(1, dtype), jnp.asarray(0, dtype))
    return jnp.minimum(below_one, _at_least_tiny(ratio, dtype))


def _binomial_meta(count, prob, generator=None):
    if not count.dtype.is_floating_point:
        raise ValueError(f"binomial only supports floating-point dtypes for count, got: {c10_name(count.dtype)}")
    if not prob.dtype.is_floating_point:
        raise ValueError(f"binomial only supports floating-point dtypes for prob, got: {c10_name(prob.dtype)}")
    if prob.dtype != count.dtype:
        raise found_dtype_error(prob.dtype, count.dtype)
    shape = torch._C._infer_size(count.shape, prob.shape)  # (ATen's message when they do not broadcast)
    return torch.empty(shape, dtype=count.dtype, device="meta")


@lower(aten.binomial.default, random=True, meta=_binomial_meta)
def binomial(ctx, count, prob, generator=None):
    """ATen's sample_binomial: 0 where count <= 0 or prob <= 0, count where
    prob >= 1, NaN where prob is NaN; else JAX's sampler (the same BTRS /
    inversion split, from TensorFlow).  A non-integer count keeps its
    fraction where prob > 1/2 (ATen returns count - Binomial(count, 1 - p)).
    An infinite count gives inf (ATen's BTRS gives inf or NaN)."""
    dtype = ctx.out_dtype
    compute = _compute(dtype)
    shape = ctx.out_shape
    n = jnp.broadcast_to(count.astype(compute), shape)
    p = jnp.broadcast_to(prob.astype(compute), shape)
    zero = (n <= 0) | (p <= 0)
    full = ~zero & ((p >= 1) | jnp.isinf(n))
    drawn = ~zero & ~full & (p == p)
    # Only valid arguments reach the sampler (its loops run until every element is done).
    sample = jax.random.binomial(ctx.rng_key(), jnp.where(drawn, n, 0), jnp.where(drawn, p, 0.5), shape, compute)
    sample = jnp.where(p > 0.5, sample + (n - jnp.floor(n)), sample)
    out = jnp.where(drawn, sample, jnp.asarray(jnp.nan, compute))  # (NaN prob, NaN count)
    out = jnp.where(full, n, out)
    out = jnp.where(zero, jnp.asarray(0, compute), out)
    return out.astype(dtype)


# --------------------------------------------------------------- bernoulli


def _bernoulli(ctx, shape, p, dtype):
    compute = _compute(dtype) if _is_float(dtype) else jnp.float32
    if hasattr(p, "dtype") and p.dtype == jnp.float64:
        compute = jnp.float64
    u = jax.random.uniform(ctx.rng_key(), shape, compute)
    return (u < jnp.asarray(p).astype(compute)).astype(dtype)


def _check_p(p):
    if not 0.0 <= p <= 1.0:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p}")


def _check_p_tensor(ctx, p):
    """ATen's check of a probability tensor (NaN fails it too)."""
    p = jnp.asarray(p)
    ctx.check(jnp.all((p >= 0) & (p <= 1)), "Expected p_in >= 0 && p_in <= 1 to be true, but got false.  "
              "(Could this error message be improved?  If so, please report an enhancement request to PyTorch.)")


@lower(aten.bernoulli.default, random=True)
def bernoulli(ctx, self, generator=None):
    _check_p_tensor(ctx, self)
    return _bernoulli(ctx, self.shape, self, ctx.out_dtype)


@lower(aten.bernoulli.p, aten.bernoulli_.float, random=True)
def bernoulli_p(ctx, self, p=0.5, generator=None):
    _check_p(p)
    return _bernoulli(ctx, self.shape, p, self.dtype)


@lower(aten.bernoulli.Tensor, random=True)
def bernoulli_tensor(ctx, self, p, generator=None):
    _check_p_tensor(ctx, p)
    return _bernoulli(ctx, self.shape, jnp.broadcast_to(p, self.shape), self.dtype)


# ------------------------------------------------------------- integers


def _int_max(dtype):
    return int(jnp.iinfo(dtype).max)


def _default_upper(dtype):
    """random_()'s inclusive upper bound for a dtype."""
    if dtype == jnp.bool_:
        return 1
    if _is_float(dtype):
        return 1 << _digits(dtype)
    return _int_max(dtype)


def _random_range(ctx, shape, low, span, dtype):
    """`low + bits % span` (span >= 1 values), ATen's modulo sampler."""
    key = ctx.rng_key()
    if span > (1 << 32) - 1:
        bits = jax.random.bits(key, shape, jnp.uint64)
        if span < (1 << 64):
            bits = bits % jnp.uint64(span)
        values = bits.astype(jnp.int64) + jnp.int64(low)  # wraps: uniform over a 2**64 span
    else:
        bits = jax.random.bits(key, shape, jnp.uint32)
        values = (bits % jnp.uint32(span)).astype(jnp.int64) + jnp.int64(low)
    if dtype == jnp.bool_:
        return values != 0
    return values.astype(dtype)


@lower(aten.random.default, random=True)
def random_default(ctx, self, generator=None):
    dtype = self.dtype
    return _random_range(ctx, self.shape, 0, _default_upper(dtype) + 1, dtype)


@lower(aten.random.to, random=True)
def random_to(ctx, self, to, generator=None):
    return _random_from(ctx, self, 0, to)


@lower(getattr(aten.random, "from"), random=True)
def random_from(ctx, self, from_, to=None, generator=None):
    return _random_from(ctx, self, from_, to)


def _random_from(ctx, self, low, to):
    # ATen's checks (from < to, both in range for the dtype), with its
    # messages and precision warnings: ATen itself on one CPU element.
    if type(low) is int and (to is None or type(to) is int):
        torch.empty(1, dtype=ctx.out_meta[0].dtype).random_(low, to)
    dtype = self.dtype
    high = _default_upper(dtype) if to is None else to - 1  # inclusive
    return _random_range(ctx, self.shape, low, high - low + 1, dtype)


# -------------------------------------------------------- permutations


def _permutation(ctx, n):
    """ATen's checks that `n` values fit the result's dtype, then the draw."""
    dtype = ctx.out_meta[0].dtype
    if dtype == torch.float16 and n > 2049:
        raise RuntimeError("n cannot be greater than 2049 for Half type.")
    if not dtype.is_floating_point and dtype != torch.bool and n > 0:
        torch.empty(1, dtype=dtype).fill_(n - 1)  # (ATen's overflow check and message)
    return jax.random.permutation(ctx.rng_key(), n).astype(ctx.out_dtype)


@lower(aten.randperm.default, random=True)
@lower(aten.randperm.out, random=True)
def randperm(ctx, n, *rest):
    return _permutation(ctx, n)


@lower(aten.randperm.generator, random=True)
@lower(aten.randperm.generator_out, random=True)
def randperm_generator(ctx, n, generator=None, *rest):
    return _permutation(ctx, n)


@lower(aten.multinomial.default, random=True)
def multinomial(ctx, self, num_samples, replacement=False, generator=None):
    """Rows of (unnormalised) probabilities -> category indices.

    With replacement: inverse CDF (a uniform draw per sample, searched in the
    row's cumulative sums: O(n + samples log n) per row, never a zero-weight
    category).  Without: the Gumbel top-k trick, which has the distribution of
    successive draws without replacement.  ATen's checks of the values
    (negative, inf/nan, zero sum) are device-side."""
    dtype = ctx.meta_args[0].dtype
    if not dtype.is_floating_point:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: {c10_name(dtype)}")
    if num_samples <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    if not replacement and num_samples > self.shape[-1]:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    compute = _compute(self.dtype)
    probs = self.astype(compute)
    if probs.ndim == 1:
        probs = probs[None]
    rows, n = probs.shape
    ctx.check(jnp.all(jnp.isfinite(probs) & (probs >= 0)),
              "probability tensor contains either `inf`, `nan` or element < 0")
    ctx.check(jnp.all(jnp.sum(probs, axis=-1) > 0), "invalid multinomial distribution (sum of probabilities <= 0)")

    key = ctx.rng_key()
    if replacement:
        cdf = jnp.cumsum(probs, axis=-1)
        u = _unit(key, (rows, num_samples), compute) * cdf[:, -1:]
        out = jax.vmap(lambda c, v: jnp.searchsorted(c, v, side="right"))(cdf, u)
        # Rounding can put u at the very top: use the last non-zero category.
        last = n - 1 - jnp.argmax(jnp.flip(probs > 0, axis=-1), axis=-1)
        out = jnp.minimum(out, last[:, None])
    else:
        gumbel = jax.random.gumbel(key, (rows, n), compute)
        _, out = lax.top_k(jnp.log(probs) + gumbel, num_samples)
    return out.astype(jnp.int64).reshape(ctx.out_shape)


# ------------------------------------------------- factories, in graphs only
#
# Eager mode runs rand/randn & co. as `empty` + `uniform_`/`normal_`; a
# compiled graph keeps them whole (without these it ran op by op).


@lower_view(aten.rand, aten.rand_like, random=True)
def rand(ctx, *args, **kwargs):
    return uniform(ctx, jnp.zeros(ctx.out_shape, ctx.out_dtype))


@lower_view(aten.randn, aten.randn_like, random=True)
def randn(ctx, *args, **kwargs):
    return normal_(ctx, jnp.zeros(ctx.out_shape, ctx.out_dtype))


# randint / randint_like: eager mode runs them as `empty` + `random_(low, high)`;
# in a graph the bounds are Python ints (a traced value where they come from
# the graph: a symbolic size, randint_like's tensor `high`).


def _randint(ctx, low, high):
    dtype = ctx.out_dtype
    if isinstance(low, int) and isinstance(high, int):
        return _random_from(ctx, jnp.zeros(ctx.out_shape, dtype), low, high)
    low = jnp.asarray(low).astype(jnp.int64).reshape(())
    high = jnp.asarray(high).astype(jnp.int64).reshape(())
    ctx.check(low < high, "random_ expects 'from' to be less than 'to'")
    span = jnp.maximum(high - low, 1).astype(jnp.uint64)
    bits = jax.random.bits(ctx.rng_key(), ctx.out_shape, jnp.uint64) % span
    values = bits.astype(jnp.int64) + low
    return values != 0 if dtype == jnp.bool_ else values.astype(dtype)


@lower_view(aten.randint.default, aten.randint.generator, random=True)
def randint(ctx, high, *args, **kwargs):
    return _randint(ctx, 0, high)


@lower_view(aten.randint.low, aten.randint.low_generator, random=True)
def randint_low(ctx, low, high, *args, **kwargs):
    return _randint(ctx, low, high)


@lower_view(aten.randint_like.default, aten.randint_like.generator, aten.randint_like.Tensor,
            aten.randint_like.Tensor_generator, random=True)
def randint_like(ctx, self, high, *args, **kwargs):
    return _randint(ctx, 0, high)


@lower_view(aten.randint_like.low_dtype, aten.randint_like.low_generator_dtype, random=True)
def randint_like_low(ctx, self, low, high, *args, **kwargs):
    return _randint(ctx, low, high)
