#!/usr/bin/env python3
"""Fit Q(t) = erfc(z) exp(z^2) / t, t = 1 / (1 + z / 2), by a polynomial in t on (0, 1].

libtensor/cpu/cpu_math.h computes erfc(z) = t exp(-z^2) Q(t) for GELU and its gradient; this
prints the coefficients it uses (lowest degree first) and the fit's largest relative error
in double and in float (Estrin's scheme, as the C code). Needs numpy and scipy (tooling
only; the build does not run it).

    python3 scripts/erfc_fit.py [--degree 10]
"""
import argparse

import numpy as np
from scipy.special import erfcx


def q_exact(t):
    z = 2.0 / t - 2.0
    return erfcx(z) / t


def fit(degree, nodes=4000, rounds=30):
    """Least squares for relative error on Chebyshev nodes, reweighted towards the worst
    points so that the result approaches the minimax polynomial."""
    u = np.cos(np.pi * (np.arange(nodes) + 0.5) / nodes)
    t = np.clip((u + 1) / 2, 1e-12, 1)
    q = q_exact(t)
    w = 1 / q
    for _ in range(rounds):
        c = np.polynomial.polynomial.polyfit(t, q, degree, w=w)
        r = np.abs(np.polynomial.polynomial.polyval(t, c) - q) / q
        w = w * (1 + 50 * r / r.max())
    return c


def estrin_f32(c, t):
    """Estrin's scheme in float: pairs, then powers t^2, t^4, t^8, ..."""
    c = [np.float32(x) for x in c]
    terms = [c[i] + c[i + 1] * t if i + 1 < len(c) else c[i] + 0 * t for i in range(0, len(c), 2)]
    power = t * t
    while len(terms) > 1:
        terms = [terms[i] + terms[i + 1] * power if i + 1 < len(terms) else terms[i]
                 for i in range(0, len(terms), 2)]
        power = power * power
    return terms[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--degree", type=int, default=10)
    args = ap.parse_args()
    c = fit(args.degree)
    t = np.linspace(1e-9, 1, 200001)
    exact = q_exact(t)
    err64 = np.max(np.abs(np.polynomial.polynomial.polyval(t, c) - exact) / exact)
    t32 = t.astype(np.float32)
    exact32 = q_exact(t32.astype(np.float64))
    err32 = np.max(np.abs(estrin_f32(c, t32).astype(np.float64) - exact32) / exact32)
    for i, x in enumerate(c):
        print(f"c{i} = {x:.9e}f")
    print(f"max relative error: {err64:.3g} (double), {err32:.3g} (float, Estrin)")


if __name__ == "__main__":
    main()
