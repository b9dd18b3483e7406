#!/usr/bin/python3
# Fits the rational tanh of the real-time kernel (src/cpu/gate_math-inl.h, StreamTanh):
# tanh(x) ~ x P(u) / Q(u), u = x^2, P of degree 6 and Q of degree 3 with P(0) = Q(0) = 1, for
# |x| <= 9 (the argument is clamped there: 1 - tanh(9) is half an f32 ulp of 1). Linearised
# least squares on Chebyshev nodes (x P - tanh(x) Q = tanh(x), divided by the previous Q:
# Loeb's iteration), reweighted towards the largest relative errors (Lawson's), in the
# variable u / 81 for conditioning; then rounds the coefficients to f32 and reports the worst
# error of an f32 evaluation (Horner; the kernel uses Estrin's scheme, measured in
# tests/test_gru_stream.cpp) in ulp and absolute.
# Needs python3-numpy (Debian). Usage: /usr/bin/python3 tests/reference/fit_stream_tanh.py
import numpy as np

CUT, P_DEGREE, Q_DEGREE, NODES = 9.0, 6, 3, 6000


def fit():
    k = np.arange(NODES)
    x = CUT * (1 - np.cos(np.pi * (k + 0.5) / NODES)) / 2
    x = x[x > 1e-5]
    v = (x / CUT) ** 2
    t = np.tanh(x)
    # Unknowns p1..p6, q1..q3: x (P - 1) - t (Q - 1) = t - x.
    a = np.hstack([x[:, None] * np.vander(v, P_DEGREE + 1, increasing=True)[:, 1:],
                   -t[:, None] * np.vander(v, Q_DEGREE + 1, increasing=True)[:, 1:]])
    w = np.ones_like(x)
    q_prev = np.ones_like(x)
    for _ in range(80):
        scale = w / (t * q_prev)
        c, *_ = np.linalg.lstsq(a * scale[:, None], (t - x) * scale, rcond=None)
        p = np.concatenate([[1.0], c[:P_DEGREE]])
        q = np.concatenate([[1.0], c[P_DEGREE:]])
        q_prev = np.polyval(q[::-1], v)
        err = np.abs(x * np.polyval(p[::-1], v) / q_prev - t) / t
        w = w * np.sqrt(err / err.max()) + 1e-30
        w /= w.max()
    s = CUT ** (-2.0 * np.arange(P_DEGREE + 1))
    return p * s, q * s[:Q_DEGREE + 1]


def horner(c, u):
    r = c[-1]
    for a in c[-2::-1]:
        r = (r * u + a).astype(np.float32)
    return r


def main():
    p, q = fit()
    p32, q32 = p.astype(np.float32), q.astype(np.float32)
    xs = np.concatenate([np.linspace(0, CUT, 400001)[1:], np.logspace(-8, 0, 20000)]).astype(np.float32)
    us = (xs * xs).astype(np.float32)
    got = ((xs * horner(p32, us)).astype(np.float32) / horner(q32, us)).astype(np.float32)
    want = np.tanh(xs.astype(np.float64))
    err = np.abs(got - want)
    ulp = np.spacing(want.astype(np.float32)).astype(np.float64)
    print("P (u^0 .. u^%d):" % P_DEGREE, ", ".join("%.9g" % v for v in p32))
    print("Q (u^0 .. u^%d):" % Q_DEGREE, ", ".join("%.9g" % v for v in q32))
    print("worst error on (0, %g]: %.2f ulp, %.2e absolute" % (CUT, (err / ulp).max(), err.max()))


if __name__ == "__main__":
    main()
