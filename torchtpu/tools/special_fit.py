"""Generates torchtpu/ops/lowerings/_special_coeffs.py: Chebyshev expansions
for the special functions XLA has no primitive for (Bessel J0/J1/Y0/Y1,
modified Bessel K0/K1, Airy Ai).

    python -m torchtpu.tools.special_fit      # needs scipy (development only)

Each function is split into pieces whose smooth part is fitted by Chebyshev
interpolation in a variable that maps the piece onto [-1, 1]:

- J0, J1, Y0, Y1 for |x| <= 8: J0(x) = A(x^2), J1(x) = x B(x^2),
  Y0(x) = (2/pi) log(x) J0(x) + C(x^2), Y1(x) = (2/pi)(log(x) J1(x) - 1/x) + x D(x^2);
  for x > 8 the Hankel form J = sqrt(2/(pi x)) (P cos chi - Q sin chi),
  Y = sqrt(2/(pi x)) (P sin chi + Q cos chi) with P, Q smooth in 64/x^2;
- K0, K1 for x <= 2: K0 = -log(x/2) I0(x) + E(x^2), K1 = log(x/2) I1(x) + 1/x + x F(x^2);
  for x > 2: exp(x) sqrt(x) K(x) is smooth in 2/x;
- Ai for |x| <= 2.5: Ai itself; x > 2.5: Ai = exp(-z) x^(-1/4) G(1/z) / (2 sqrt(pi)),
  z = 2/3 x^(3/2); x < -2.5: the oscillatory Hankel-like form with M, theta smooth in 1/z.

The reference values come from scipy.special in float64; the fit error is
checked on a dense grid (it is below float64's 1e-15 relative to each
piece's scale, far below float32's resolution).
"""

import os

import numpy as np

DEG = 40


def _fit(f, lo, hi, deg=DEG):
    """Chebyshev coefficients of f on [lo, hi] (t in [-1, 1] maps to it)."""
    from numpy.polynomial import chebyshev as C

    def g(t):
        return f(lo + (t + 1) * (hi - lo) / 2)

    c = C.chebinterpolate(g, deg)
    # drop the trailing terms at the reference's noise level (~1e-15)
    scale = np.max(np.abs(c))
    big = np.nonzero(np.abs(c) > 5e-15 * scale)[0]
    c = c[: max(int(big[-1]) + 1, 4)]
    t = np.linspace(-1, 1, 20001)[1:]  # (the far end of an asymptotic piece is x = inf)
    with np.errstate(all="ignore"):
        ref = g(t)
    ok = np.isfinite(ref)
    err = np.max(np.abs(C.chebval(t[ok], c) - ref[ok])) / max(np.max(np.abs(ref[ok])), 1e-300)
    return c, err


def pieces():
    from scipy import special as sp

    two_over_pi = 2 / np.pi
    out = {}

    # Bessel J/Y, small argument (in s = x^2 over [0, 64])
    out["J0_small"] = _fit(lambda s: sp.j0(np.sqrt(s)), 0, 64)
    out["J1_small"] = _fit(lambda s: np.where(s == 0, 0.5, sp.j1(np.sqrt(s)) / np.sqrt(np.maximum(s, 1e-300))), 0, 64)

    def y0_rest(s):
        x = np.sqrt(s)
        with np.errstate(all="ignore"):
            v = sp.y0(x) - two_over_pi * np.log(x) * sp.j0(x)
        # limit at 0: (2/pi)(gamma - log 2)
        return np.where(s == 0, two_over_pi * (np.euler_gamma - np.log(2)), v)

    def y1_rest(s):
        x = np.sqrt(s)
        with np.errstate(all="ignore"):
            v = (sp.y1(x) - two_over_pi * (np.log(x) * sp.j1(x) - 1 / x)) / x
        # limit at 0 of (Y1 - (2/pi)(log x J1 - 1/x)) / x: (1/pi)(gamma - log 2) - 1/(2 pi)
        return np.where(s == 0, (np.euler_gamma - np.log(2)) / np.pi - 0.5 / np.pi, v)

    out["Y0_small"] = _fit(y0_rest, 0, 64)
    out["Y1_small"] = _fit(y1_rest, 0, 64)

    # Hankel amplitudes, large argument (in u = 64 / x^2 over (0, 1])
    def hankel(order):
        jf, yf = (sp.j0, sp.y0) if order == 0 else (sp.j1, sp.y1)
        shift = np.pi / 4 if order == 0 else 3 * np.pi / 4

        def pq(u, which):
            u = np.maximum(u, 1e-6)
            x = 8 / np.sqrt(u)
            chi = x - shift
            a = np.sqrt(np.pi * x / 2)
            j, y = jf(x), yf(x)
            if which == "P":
                return a * (j * np.cos(chi) + y * np.sin(chi))
            return a * (-j * np.sin(chi) + y * np.cos(chi)) * x  # Q ~ 1/x: fit x Q

        return pq

    for order in (0, 1):
        f = hankel(order)
        out[f"P{order}"] = _fit(lambda u, f=f: f(u, "P"), 0, 1, 30)
        out[f"Q{order}"] = _fit(lambda u, f=f: f(u, "Q"), 0, 1, 30)

    # Modified Bessel K, small argument (in s = x^2 over [0, 4])
    def k0_rest(s):
        x = np.sqrt(s)
        with np.errstate(all="ignore"):
            v = sp.k0(x) + np.log(x / 2) * sp.i0(x)
        return np.where(s == 0, -np.euler_gamma, v)

    def k1_rest(s):
        x = np.sqrt(s)
        with np.errstate(all="ignore"):
            v = (sp.k1(x) - np.log(x / 2) * sp.i1(x) - 1 / x) / x
        # K1(x) = 1/x + log(x/2) I1(x) + x/4 (2 gamma - 1) + ...
        return np.where(s == 0, (2 * np.euler_gamma - 1) / 4, v)

    out["K0_small"] = _fit(k0_rest, 0, 4)
    out["K1_small"] = _fit(k1_rest, 0, 4)
    # large argument: exp(x) sqrt(x) K(x) in u = 2 / x over (0, 1]
    for name, f in (("K0_large", sp.k0e), ("K1_large", sp.k1e)):
        out[name] = _fit(lambda u, f=f: f(2 / np.maximum(u, 1e-6)) * np.sqrt(2 / np.maximum(u, 1e-6)), 0, 1, 40)

    # Airy Ai
    out["Ai_mid"] = _fit(sp.airy.__call__ and (lambda x: sp.airy(x)[0]), -2.5, 2.5, 60)

    def ai_pos(w):  # w = 1/z in (0, 1/z0]
        w = np.maximum(w, 1e-6)
        z = 1 / w
        x = (1.5 * z) ** (2 / 3)
        return sp.airye(x)[0] * x**0.25 * 2 * np.sqrt(np.pi)  # airye: Ai(x) exp(z)

    z0 = 2 / 3 * 2.5**1.5
    out["Ai_pos"] = _fit(ai_pos, 0, 1 / z0, 40)

    def ai_neg(w, which):  # x = -(1.5 z)^(2/3), Ai = |x|^(-1/4)/sqrt(pi) (M ...)
        w = np.maximum(w, 1e-6)
        z = 1 / w
        x = (1.5 * z) ** (2 / 3)
        ai, _, bi, _ = sp.airy(-x)
        amp = np.sqrt(np.pi) * x**0.25
        # Ai(-x) = amp^-1 (F sin(z + pi/4) - G cos(z + pi/4)), Bi(-x) = amp^-1 (F cos(..) + G sin(..))
        s, c = np.sin(z + np.pi / 4), np.cos(z + np.pi / 4)
        F = amp * (ai * s + bi * c)
        G = amp * (bi * s - ai * c)
        return F if which == "F" else G

    out["Ai_negF"] = _fit(lambda w: ai_neg(w, "F"), 0, 1 / z0, 40)
    out["Ai_negG"] = _fit(lambda w: ai_neg(w, "G"), 0, 1 / z0, 40)
    return out


def main():
    pcs = pieces()
    path = os.path.join(os.path.dirname(__file__), "..", "ops", "lowerings", "_special_coeffs.py")
    lines = [
        '"""Chebyshev coefficients for torchtpu/ops/lowerings/special_functions.py.',
        "",
        "Generated by `python -m torchtpu.tools.special_fit` (see there for the pieces); do not edit.",
        '"""',
        "",
    ]
    for name, (c, err) in pcs.items():
        print(f"{name}: {len(c)} terms, max relative fit error {err:.2e}")
        body = ",\n    ".join(repr(float(v)) for v in c)
        lines.append(f"# max relative fit error {err:.1e}")
        lines.append(f"{name} = (\n    {body},\n)")
        lines.append("")
    with open(os.path.normpath(path), "w") as f:
        f.write("\n".join(lines))
    print("wrote", os.path.normpath(path))


if __name__ == "__main__":
    main()
