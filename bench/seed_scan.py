# The seed's padded log-depth parallel scan, re-implemented in PyTorch as the baseline that
# bench/compare_scan.py times against grux's work-efficient scan (target >= 5x).
"""Usage:  env -u OPENBLAS_CORETYPE /usr/bin/python3 bench/seed_scan.py --selftest

A from-scratch implementation of the algorithm that the torch_parallel_scan library
(../shared/seeds/003_*) describes; none of its code is used.

prefix_scan(x, fn, dim) -- inclusive scan y_t = x_0 . x_1 . ... . x_t along `dim` for any
  associative binary `fn` that keeps shapes and broadcasts (torch.add, torch.maximum,
  torch.logaddexp, torch.matmul with `dim` a batch dimension, ...). Operands keep their
  order, so non-commutative functions such as matmul give x_0 @ x_1 @ ... @ x_t.
  Algorithm (padded, log depth, O(n log n) combines):
    1. pad the sequence along `dim` to the next power of two P (with `pad_value`, zeros by
       default; the padding sits after every real element, so it never reaches them);
    2. for half = 1, 2, 4, ..., P/2: view the sequence as P / (2 half) blocks of 2 half
       elements; in every block, combine the last element of the left half with each
       element of the right half, fn(left_last, right) broadcast over the right half, and
       store the result in the right half. All blocks of a level are one batched call;
    3. drop the padding.
  After level `half` every block of 2 half elements holds its own inclusive scan. Each level
  does P / 2 combines, so log2(P) levels do (P / 2) log2(P) combines in all (8192 matrices:
  53248 matmuls, against 8191 for a sequential chain). Without autograd the right halves are
  overwritten in place; when x requires grad each level is rebuilt with torch.cat instead
  (differentiable, one extra copy per level).

reduce_scan(x, fn, dim) -- fn-reduction of the whole sequence (x_0 . x_1 . ... . x_{n-1}, with
  `dim` removed) by a pairwise tree: combine elements (0, 1), (2, 3), ... in one batched
  call, carry an odd last element along, repeat; ceil(log2 n) levels, n - 1 combines.

sequential_scan(x, fn, dim) -- the plain left-to-right loop, the oracle.

--selftest checks prefix_scan and reduce_scan against sequential_scan in float64 for
lengths 1, 2, 3, 7, 1000 with add, mul, maximum, logaddexp and matmul (near-orthogonal 3x3
matrices, so long products stay O(1)), on dim 0 and on a middle dim, plus the autograd path.
"""

import argparse
import sys

import torch


def _next_pow2(n):
    return 1 << (n - 1).bit_length()


def prefix_scan(x, fn, dim=0, pad_value=0.0):
    dim = dim % x.dim()
    n = x.shape[dim]
    P = _next_pow2(n)
    if P != n:
        pad_shape = list(x.shape)
        pad_shape[dim] = P - n
        x = torch.cat([x, x.new_full(pad_shape, pad_value)], dim)
    pre, post = tuple(x.shape[:dim]), tuple(x.shape[dim + 1:])
    differentiable = torch.is_grad_enabled() and x.requires_grad
    if not differentiable:
        x = x.clone(memory_format=torch.contiguous_format)
    half = 1
    while half < P:
        blocks = x.contiguous().view(pre + (P // (2 * half), 2 * half) + post)
        left_last = blocks.narrow(dim + 1, half - 1, 1)
        right = blocks.narrow(dim + 1, half, half)
        combined = fn(left_last, right)
        if differentiable:
            x = torch.cat([blocks.narrow(dim + 1, 0, half), combined], dim + 1).view(x.shape)
        else:
            right.copy_(combined)
        half *= 2
    return x.narrow(dim, 0, n)


def reduce_scan(x, fn, dim=0):
    dim = dim % x.dim()
    while x.shape[dim] > 1:
        n = x.shape[dim]
        even = n - n % 2
        pairs = x.narrow(dim, 0, even).reshape(
            tuple(x.shape[:dim]) + (even // 2, 2) + tuple(x.shape[dim + 1:]))
        r = fn(pairs.narrow(dim + 1, 0, 1), pairs.narrow(dim + 1, 1, 1)).squeeze(dim + 1)
        if n % 2:
            r = torch.cat([r, x.narrow(dim, n - 1, 1)], dim)
        x = r
    return x.squeeze(dim)


def sequential_scan(x, fn, dim=0):
    dim = dim % x.dim()
    acc = x.select(dim, 0)
    out = [acc]
    for t in range(1, x.shape[dim]):
        acc = fn(acc, x.select(dim, t))
        out.append(acc)
    return torch.stack(out, dim)


# --------------------------------------------------------------------------- self-test
def _near_orthogonal(n, d, gen):
    q, _ = torch.linalg.qr(torch.randn(n, d, d, generator=gen, dtype=torch.float64))
    return q + 0.01 * torch.randn(n, d, d, generator=gen, dtype=torch.float64)


def selftest():
    gen = torch.Generator().manual_seed(1234)
    f64 = torch.float64
    ops = {
        "add": (torch.add, lambda s: torch.randn(s, generator=gen, dtype=f64)),
        "mul": (torch.mul, lambda s: 1 + 0.01 * torch.randn(s, generator=gen, dtype=f64)),
        "maximum": (torch.maximum, lambda s: torch.randn(s, generator=gen, dtype=f64)),
        "logaddexp": (torch.logaddexp, lambda s: torch.randn(s, generator=gen, dtype=f64)),
    }
    failures = 0
    checks = 0

    def check(what, got, want):
        nonlocal failures, checks
        checks += 1
        scale = want.abs().max().clamp_min(1.0)
        err = float((got - want).abs().max() / scale) if want.numel() else 0.0
        ok = got.shape == want.shape and err <= 1e-10
        if not ok:
            failures += 1
            print(f"FAIL {what}: shape {tuple(got.shape)} vs {tuple(want.shape)}, "
                  f"max rel err {err:.3g}")

    for n in (1, 2, 3, 7, 1000):
        for name, (fn, make) in ops.items():
            for shape, dim in (((n,), 0), ((2, n, 3), 1), ((n, 4), -2)):
                x = make(shape)
                want = sequential_scan(x, fn, dim)
                check(f"prefix_scan {name} n={n} shape={shape} dim={dim}",
                      prefix_scan(x, fn, dim), want)
                check(f"reduce_scan {name} n={n} shape={shape} dim={dim}",
                      reduce_scan(x, fn, dim), want.select(dim % x.dim(), n - 1))
        # non-commutative: matrix products keep their order
        x = _near_orthogonal(n, 3, gen)
        want = sequential_scan(x, torch.matmul, 0)
        check(f"prefix_scan matmul n={n}", prefix_scan(x, torch.matmul, -3), want)
        check(f"reduce_scan matmul n={n}", reduce_scan(x, torch.matmul, -3), want[-1])
        x2 = _near_orthogonal(2 * n, 3, gen).view(2, n, 3, 3)
        check(f"prefix_scan matmul n={n} batched dim=1", prefix_scan(x2, torch.matmul, 1),
              sequential_scan(x2, torch.matmul, 1))
    # autograd path (torch.cat per level) against autograd through the sequential loop
    for n in (1, 7, 13):
        x = _near_orthogonal(n, 3, gen).requires_grad_(True)
        w = torch.randn(n, 3, 3, generator=gen, dtype=f64)
        got = prefix_scan(x, torch.matmul, 0)
        (g_got,) = torch.autograd.grad((got * w).sum(), x)
        want = sequential_scan(x, torch.matmul, 0)
        (g_want,) = torch.autograd.grad((want * w).sum(), x)
        check(f"prefix_scan matmul autograd n={n} value", got.detach(), want.detach())
        check(f"prefix_scan matmul autograd n={n} grad", g_got, g_want)
    print(f"seed_scan selftest: {checks - failures}/{checks} checks passed "
          f"(lengths 1, 2, 3, 7, 1000; add, mul, maximum, logaddexp, matmul; float64)")
    return failures == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--selftest", action="store_true", help="check against the sequential loop")
    a = ap.parse_args()
    if not a.selftest:
        ap.print_usage()
        return 2
    torch.set_num_threads(1)
    return 0 if selftest() else 1


if __name__ == "__main__":
    sys.exit(main())
