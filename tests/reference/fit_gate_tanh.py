#!/usr/bin/python3
# Fits the polynomial of the f32 tanh in src/cpu/gru_gates.cpp (TanhF32): tanh(x) / x as a
# degree-5 polynomial in u = x^2 on |x| < 0.625, by least squares on Chebyshev nodes,
# reweighted towards the largest relative errors (Lawson's iteration, near minimax), then
# rounds the coefficients to f32 and reports the worst error of the f32 evaluation in ulp.
# Needs python3-numpy (Debian). Usage: /usr/bin/python3 tests/reference/fit_gate_tanh.py
import numpy as np

CUT, DEGREE, NODES = 0.625, 5, 2000


def main():
    k = np.arange(NODES)
    u = CUT * CUT * (1 - np.cos(np.pi * (k + 0.5) / NODES)) / 2
    x = np.sqrt(u)
    f = np.tanh(x) / x
    vander = np.vander(u, DEGREE + 1, increasing=True)
    w = np.ones_like(u)
    for _ in range(50):
        coef, *_ = np.linalg.lstsq(vander * w[:, None], f * w, rcond=None)
        w = w * np.sqrt(np.abs((vander @ coef - f) / f)) + 1e-30
        w /= w.max()
    c32 = coef.astype(np.float32)
    xs = np.linspace(0, CUT, 200001).astype(np.float32)[1:]
    us = xs * xs
    p = c32[-1]
    for c in c32[-2::-1]:
        p = (p * us + c).astype(np.float32)
    want = np.tanh(xs.astype(np.float64))
    ulp = np.spacing(want.astype(np.float32)).astype(np.float64)
    print("coefficients (u^0 .. u^%d):" % DEGREE, ", ".join("%.17g" % v for v in c32))
    print("worst error on (0, %g): %.2f ulp" % (CUT, (np.abs(p * xs - want) / ulp).max()))


if __name__ == "__main__":
    main()
