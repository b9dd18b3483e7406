#!/usr/bin/python3
# Golden files for the scan tests: PyTorch / float64 reference results for element-wise scans
# (cumsum, cumprod, cummax, cummin, logcumsumexp), affine recurrences (diagonal, matrix,
# log-space) with autograd gradients, cumulative matrix products and a sequential minGRU
# reference module, written as safetensors files into tests/reference/golden/scan/.
"""Regenerate with:  env -u OPENBLAS_CORETYPE /usr/bin/python3 tests/reference/gen_scan_golden.py

Needs Debian's python3-torch and python3-numpy (use /usr/bin/python3: the pyenv python3 has
no torch). Writes tests/reference/golden/scan/<name>.safetensors next to this script and
prints each file's size and the total (kept under 400 KB). Deterministic: every case seeds
torch.manual_seed from a hash of its name *without* the dtype suffix, so the f32 and f64
files of a case hold the same draws; one thread, deterministic algorithms. Running it twice
gives byte-identical files.

File format: the safetensors layout of gen_gru_golden.py (see tests/reference/README.md; the
writer is imported from there): keys sorted, tensors contiguous, `__metadata__` holds one
string `config`, a JSON object with at least `kind`, `dtype` and `note`.

Precision. Every reference result is computed in float64. A `*_f64` file holds the f64
inputs and f64 results. A `*_f32` file holds the *same draws rounded to f32* as inputs, and
the results of the float64 computation on those rounded inputs, rounded to f32 once at the
end. So an f32 implementation should match to within its own accumulated rounding, and an
f64 one to near machine precision. All float tensors of a file have the file's dtype; index /
flag tensors (`lengths`, `batch_first`, `log_space`) are I64.

1. Element-wise scans: `{op}_{case}_{dtype}`, op in cumsum, cumprod, cummax, cummin,
   logcumsumexp.
   keys: `x`; `inclusive` = torch.<op>(x, dim) (cummax/cummin: the values);
   `exclusive` = inclusive shifted by one along dim, first element = identity
   (0 sum, 1 prod, -inf max, +inf min, -inf logcumsumexp);
   `reverse_inclusive` = flip(scan(flip(x, dim)), dim);
   `reverse_exclusive` = reverse_inclusive shifted the other way, last element = identity.
   config: kind "elementwise", op, case, dim, shape, identity ("0", "1", "-inf", "inf").
   x = randn, except cumprod: x = 1 + 0.01 * randn (products stay O(1)).
   cases         shape       dim  dtypes   ops
     len1          (1,)        0    f32 f64  all five
     len7_dim0     (7,)        0    f32 f64  all five
     t13c5_dim0    (13, 5)     0    f32 f64  all five
     n1t1000_dim1  (1, 1000)   1    f32      cumsum, logcumsumexp only
   plus `logcumsumexp_inf_{f32,f64}`: x (4, 7), dim 1, with -inf and +inf entries (a row of
   -inf only, a row starting with -inf, a row with +inf then finite and -inf entries, a row
   with +inf and -inf together); results are torch.logcumsumexp's: -inf entries add nothing,
   an empty or all -inf prefix gives -inf, any +inf in the prefix gives +inf.
   Size: five tensors per file make long cases expensive (one op at length 4097 in f32 is
   82 KB), so the 400 KB budget has no length-4097 case and only one length-1000 case per
   accumulating op, in f32 (where accumulated rounding shows). cumprod, cummax and cummin
   at long lengths, and every op at 4097 and at other dims, are left to the C++ tests'
   sequential oracle; the small cases pin down PyTorch's semantics (identities, reverse,
   exclusive, dim).

2. Affine recurrences, time along dim 0, h_t = a_t * h_{t-1} + b_t (t = 0..T-1, h_{-1} = h0),
   computed by a plain Python loop in float64.
   `affine_diag_t{T}_{dtype}`, (T, N, C) in (1, 2, 3), (7, 2, 3), (300, 1, 2):
     `a` (T,N,C) ~ U(-1.1, 1.1), `b` (T,N,C) randn, `h0` (N,C) randn, `h` (T,N,C);
     `dh` (T,N,C) randn and the autograd gradients of sum(h * dh): `da`, `db`, `dh0`.
   `affine_matrix_t{T}_{dtype}`, d = 4, (T, N) in (1, 2), (5, 2), (33, 1):
     h_t = A_t @ h_{t-1} + b_t with
     `a` (T,N,d,d) = randn / sqrt(d) (the matrices A_t; key `a` as in `grux scan affine --a`),
     `b` (T,N,d), `h0` (N,d), `h` (T,N,d), `dh` (T,N,d), `da` (T,N,d,d), `db`, `dh0`.
   `affine_log_{dtype}`: positive terms for the log-space scan, T = 500, N = 1, C = 1:
     `a` ~ U(0.5, 1), `b` ~ U(0.1, 1), `h0` ~ U(0.5, 1.5), `h` (T,N,C) from the f64 loop;
     h stays in [0.9, 4.2] while prod(a) reaches 7e-65 (f32's cumprod is 0 from t = 353).
   `affine_log_long_f32` (f32 only): the long-product case: a ~ U(0.88, 0.92) (a ~ 0.9),
     b ~ U(0.05, 0.15), h0 ~ U(0.5, 1.5), T = 2000, N = 1, C = 1: cumprod(a) is 0 in f32
     from t = 983 on (1.7e-92 at the end) while h stays in [0.8, 1.4].
     No gradients. config of both: `min_cumprod_a` (smallest f64 cumprod of a, a string)
     and `f32_cumprod_a_zero_from` (first t where an f32 cumprod of a is 0, or -1).
   config: kind "affine_diag" / "affine_matrix" / "affine_log", dim 0, T, N, C or d.

3. Cumulative matrix products `matmul_t{T}_d{d}_{dtype}`, T in 1, 7, 100 for d = 3 and
   T in 7, 17 for d = 8 (T = 100 at d = 8 would be 230 KB alone):
   `x` (T,d,d) = randn / sqrt(d); `inclusive` y_t = x_0 @ x_1 @ ... @ x_t (the running
   product multiplied on the right); `reverse_inclusive` y_t = x_t @ x_{t+1} @ ... @ x_{T-1};
   `total` (d,d) = x_0 @ ... @ x_{T-1}. Sequential f64 loop. config: kind "matmul", dim 0.
   Products of randn/sqrt(d) matrices shrink with t (at d = 3, T = 100 the total is ~1e-9):
   compare with a tolerance relative to each product's own magnitude.

4. minGRU (Feng et al. 2024, "Were RNNs All We Needed?"), a sequential reference (a Python
   loop over t in float64, MinGRURef below), `mingru_*_{dtype}`:
   layer k (input width in_k = I for k = 0, H above) has `weight_l{k}` (2H, in_k) and
   `bias_l{k}` (2H); rows [0, H) give the z pre-activation, rows [H, 2H) the candidate:
     z_t  = sigmoid(W_z x_t + b_z)
     h~_t = W_h x_t + b_h                        (linear variant)
     h~_t = g(W_h x_t + b_h),  g(v) = v + 0.5 if v >= 0 else sigmoid(v)   (log variant)
     h_t  = (1 - z_t) * h_{t-1} + z_t * h~_t
   Initial state h_{-1}: linear: `h0` if given, else 0; log variant: g(`h0`) if given, else
   g(0) = 0.5. (`d_h0` is the gradient w.r.t. the stored raw `h0`, through g.)
   Layer k+1's input is layer k's output. Weights ~ U(-1/sqrt(in_k), 1/sqrt(in_k)),
   input / h0 / upstream gradients randn.
   keys: `input` (T,N,I), or (N,T,I) when `batch_first` = 1; `batch_first` and `log_space`
   (I64 scalars, 0 or 1); `h0` (L,N,H) if given; `lengths` (N,) I64 if given (unsorted,
   1 <= len <= T, containing 1 and T); `weight_l{k}`, `bias_l{k}`; `output` (T,N,H) or
   (N,T,H); `h_n` (L,N,H); `doutput` (as output), `dh_n` (as h_n), randn; gradients of
   sum(output * doutput) + sum(h_n * dh_n): `d_input`, `d_h0` (if h0 given),
   `d_weight_l{k}`, `d_bias_l{k}`.
   With lengths, sequence n only runs for t < lengths[n] (like PyTorch's packed GRU):
   output is exactly 0 at t >= lengths[n], h_n holds the state after step lengths[n] - 1,
   and `d_input` is exactly 0 at padded positions (input and doutput are random there).
   config: kind "mingru", log_space, num_layers, input_size, hidden_size, batch_first,
   has_h0, has_lengths, T, N.
"""

import hashlib
import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gen_gru_golden import safetensors_bytes  # noqa: E402

OUT_DIR = os.path.join(HERE, "golden", "scan")
F64 = torch.float64
DTYPES = {"f32": torch.float32, "f64": torch.float64}
SIZE_LIMIT = 400 * 1024


def seed_of(name):
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")


def seeded(base):
    s = seed_of(base)
    torch.manual_seed(s)
    return s


def as_input(t, dt):
    """A draw made in f64, rounded to the file's dtype, returned as f64 for computing."""
    return t.to(dt).to(F64)


def finish(tensors, dt, config):
    """Checks and casts the float tensors to the file's dtype, returns the file's bytes."""
    out = {}
    for k, t in tensors.items():
        t = t.detach()
        if t.dtype == torch.int64:
            out[k] = t
        else:
            assert t.dtype == F64, (k, t.dtype)
            out[k] = t.to(dt)
    meta = {"config": json.dumps(config, sort_keys=True, separators=(",", ":"))}
    return safetensors_bytes(out, meta)


# --------------------------------------------------------------------------- 1. elementwise
IDENT = {"cumsum": 0.0, "cumprod": 1.0, "cummax": -math.inf, "cummin": math.inf,
         "logcumsumexp": -math.inf}
IDENT_STR = {0.0: "0", 1.0: "1", -math.inf: "-inf", math.inf: "inf"}


def scan_op(op, x, dim):
    if op == "cumsum":
        return torch.cumsum(x, dim)
    if op == "cumprod":
        return torch.cumprod(x, dim)
    if op == "cummax":
        return torch.cummax(x, dim).values
    if op == "cummin":
        return torch.cummin(x, dim).values
    if op == "logcumsumexp":
        return torch.logcumsumexp(x, dim)
    raise ValueError(op)


def shift(y, dim, ident, reverse):
    """Exclusive from inclusive: shift by one along dim, filling with the identity."""
    T = y.shape[dim]
    fill_shape = list(y.shape)
    fill_shape[dim] = 1
    fill = torch.full(fill_shape, ident, dtype=y.dtype)
    if reverse:
        return torch.cat([y.narrow(dim, 1, T - 1), fill], dim)
    return torch.cat([fill, y.narrow(dim, 0, T - 1)], dim)


def elementwise_tensors(op, x, dim):
    ident = IDENT[op]
    inc = scan_op(op, x, dim)
    rinc = torch.flip(scan_op(op, torch.flip(x, [dim]), dim), [dim])
    return {"x": x, "inclusive": inc, "exclusive": shift(inc, dim, ident, False),
            "reverse_inclusive": rinc, "reverse_exclusive": shift(rinc, dim, ident, True)}


EW_OPS = ["cumsum", "cumprod", "cummax", "cummin", "logcumsumexp"]
# (case, shape, dim, dtypes, ops)
EW_CASES = [
    ("len1", (1,), 0, ("f32", "f64"), EW_OPS),
    ("len7_dim0", (7,), 0, ("f32", "f64"), EW_OPS),
    ("t13c5_dim0", (13, 5), 0, ("f32", "f64"), EW_OPS),
    ("n1t1000_dim1", (1, 1000), 1, ("f32",), ["cumsum", "logcumsumexp"]),
]


def elementwise_case(op, case, shape, dim, dtype):
    dt = DTYPES[dtype]
    base = f"{op}_{case}"
    seed = seeded(base)
    r = torch.randn(shape, dtype=F64)
    x = as_input(1.0 + 0.01 * r if op == "cumprod" else r, dt)
    tensors = elementwise_tensors(op, x, dim)
    config = dict(kind="elementwise", op=op, case=case, dim=dim, shape=list(shape),
                  dtype=dtype, identity=IDENT_STR[IDENT[op]],
                  note=f"seed={seed}; x = " + ("1 + 0.01*randn" if op == "cumprod" else "randn")
                  + "; results computed in f64 from the stored x")
    return finish(tensors, dt, config)


def logcumsumexp_inf_case(dtype):
    dt = DTYPES[dtype]
    seed = seeded("logcumsumexp_inf")
    x = torch.randn(4, 7, dtype=F64)
    inf = math.inf
    x[0, :] = -inf                      # all -inf: -inf everywhere
    x[1, 0:2] = -inf                    # leading -inf, then finite
    x[1, 4] = -inf                      # -inf in the middle adds nothing
    x[2, 2] = inf                       # +inf, then finite and -inf entries
    x[2, 5] = -inf
    x[3, 1] = -inf                      # -inf and +inf together
    x[3, 3] = inf
    x[3, 4] = inf
    x = as_input(x, dt)
    tensors = elementwise_tensors("logcumsumexp", x, 1)
    config = dict(kind="elementwise", op="logcumsumexp", case="inf", dim=1, shape=[4, 7],
                  dtype=dtype, identity="-inf",
                  note=f"seed={seed}; randn with -inf / +inf entries; torch.logcumsumexp "
                       "semantics: -inf adds nothing, all -inf prefix -> -inf, +inf -> +inf")
    return finish(tensors, dt, config)


# --------------------------------------------------------------------------- 2. affine
def affine_loop(a, b, h0, matrix):
    h, hs = h0, []
    for t in range(a.shape[0]):
        if matrix:
            h = torch.matmul(a[t], h.unsqueeze(-1)).squeeze(-1) + b[t]
        else:
            h = a[t] * h + b[t]
        hs.append(h)
    return torch.stack(hs, 0)


def affine_grad_case(kind, T, N, C, dtype):
    dt = DTYPES[dtype]
    matrix = kind == "affine_matrix"
    base = f"{kind}_t{T}"
    seed = seeded(base)
    if matrix:
        a = torch.randn(T, N, C, C, dtype=F64) / math.sqrt(C)
    else:
        a = torch.rand(T, N, C, dtype=F64) * 2.2 - 1.1
    b = torch.randn(T, N, C, dtype=F64)
    h0 = torch.randn(N, C, dtype=F64)
    dh = torch.randn(T, N, C, dtype=F64)
    a, b, h0, dh = (as_input(t, dt) for t in (a, b, h0, dh))
    a.requires_grad_(True)
    b.requires_grad_(True)
    h0.requires_grad_(True)
    h = affine_loop(a, b, h0, matrix)
    da, db, dh0 = torch.autograd.grad((h * dh).sum(), [a, b, h0])
    tensors = {"a": a, "b": b, "h0": h0, "h": h, "dh": dh, "da": da, "db": db, "dh0": dh0}
    for k, t in tensors.items():
        assert bool(torch.isfinite(t).all()), (base, k)
    config = dict(kind=kind, dim=0, T=T, N=N, dtype=dtype,
                  note=f"seed={seed}; h_t = " + ("A_t @ h_{t-1}" if matrix else "a_t * h_{t-1}")
                  + " + b_t, f64 loop; grads of sum(h*dh) by autograd; "
                  + ("a = randn/sqrt(d)" if matrix else "a ~ U(-1.1, 1.1)")
                  + ", b, h0, dh randn")
    config["d" if matrix else "C"] = C
    return finish(tensors, dt, config)


def affine_log_case(name, T, C, alo, ahi, blo, bhi, dtype):
    dt = DTYPES[dtype]
    seed = seeded(name)
    a = as_input(torch.rand(T, 1, C, dtype=F64) * (ahi - alo) + alo, dt)
    b = as_input(torch.rand(T, 1, C, dtype=F64) * (bhi - blo) + blo, dt)
    h0 = as_input(torch.rand(1, C, dtype=F64) + 0.5, dt)
    h = affine_loop(a, b, h0, False)
    cp = torch.cumprod(a, 0)
    zero32 = (torch.cumprod(a.to(torch.float32), 0) == 0).reshape(T, -1).any(1)
    assert bool((h > 0).all()) and bool(torch.isfinite(h).all())
    config = dict(kind="affine_log", dim=0, T=T, N=1, C=C, dtype=dtype,
                  min_cumprod_a=f"{float(cp.min()):.3e}",
                  f32_cumprod_a_zero_from=int(zero32.nonzero()[0]) if bool(zero32.any()) else -1,
                  note=f"seed={seed}; positive terms a ~ U({alo}, {ahi}), b ~ U({blo}, {bhi}), "
                       "h0 ~ U(0.5, 1.5); h_t = a_t*h_{t-1} + b_t by an f64 loop")
    return finish({"a": a, "b": b, "h0": h0, "h": h}, dt, config)


# --------------------------------------------------------------------------- 3. matmul
def matmul_case(T, d, dtype):
    dt = DTYPES[dtype]
    base = f"matmul_t{T}_d{d}"
    seed = seeded(base)
    x = as_input(torch.randn(T, d, d, dtype=F64) / math.sqrt(d), dt)
    inc = [x[0]]
    for t in range(1, T):
        inc.append(inc[-1] @ x[t])
    rinc = [x[T - 1]]
    for t in range(T - 2, -1, -1):
        rinc.append(x[t] @ rinc[-1])
    rinc.reverse()
    inc, rinc = torch.stack(inc), torch.stack(rinc)
    config = dict(kind="matmul", dim=0, T=T, d=d, dtype=dtype,
                  note=f"seed={seed}; x = randn/sqrt(d); inclusive[t] = x_0 @ ... @ x_t, "
                       "reverse_inclusive[t] = x_t @ ... @ x_{T-1}, f64 loop")
    return finish({"x": x, "inclusive": inc, "reverse_inclusive": rinc, "total": inc[-1]},
                  dt, config)


# --------------------------------------------------------------------------- 4. minGRU
def g(v):
    """minGRU's g: v + 0.5 for v >= 0, sigmoid(v) below (continuous, positive)."""
    return torch.where(v >= 0, v + 0.5, torch.sigmoid(v))


class MinGRURef(torch.nn.Module):
    """Sequential minGRU stack (float64 reference). See the module docstring, section 4."""

    def __init__(self, input_size, hidden_size, num_layers=1, batch_first=False,
                 log_space=False):
        super().__init__()
        self.H, self.L = hidden_size, num_layers
        self.batch_first, self.log_space = batch_first, log_space
        for k in range(num_layers):
            fan_in = input_size if k == 0 else hidden_size
            bound = 1.0 / math.sqrt(fan_in)
            w = torch.empty(2 * hidden_size, fan_in, dtype=F64).uniform_(-bound, bound)
            bb = torch.empty(2 * hidden_size, dtype=F64).uniform_(-bound, bound)
            self.register_parameter(f"weight_l{k}", torch.nn.Parameter(w))
            self.register_parameter(f"bias_l{k}", torch.nn.Parameter(bb))

    def forward(self, x, h0=None, lengths=None):
        if self.batch_first:
            x = x.transpose(0, 1)
        T, N, _ = x.shape
        H = self.H
        if lengths is None:
            lengths = torch.full((N,), T, dtype=torch.int64)
        finals = []
        for k in range(self.L):
            w, bias = getattr(self, f"weight_l{k}"), getattr(self, f"bias_l{k}")
            if h0 is None:
                h = torch.full((N, H), 0.5 if self.log_space else 0.0, dtype=x.dtype)
            else:
                h = g(h0[k]) if self.log_space else h0[k]
            outs = []
            for t in range(T):
                pre = x[t] @ w.t() + bias
                z = torch.sigmoid(pre[:, :H])
                cand = g(pre[:, H:]) if self.log_space else pre[:, H:]
                h_new = (1 - z) * h + z * cand
                live = (t < lengths).unsqueeze(1)
                h = torch.where(live, h_new, h)
                outs.append(torch.where(live, h_new, torch.zeros_like(h_new)))
            x = torch.stack(outs, 0)
            finals.append(h)
        out = x.transpose(0, 1) if self.batch_first else x
        return out, torch.stack(finals, 0)


MINGRU_CASES = [
    # name, L, T, N, I, H, h0, lengths, batch_first, log_space
    ("mingru_basic", 1, 6, 3, 5, 4, True, None, False, False),
    ("mingru_basic_noh0", 1, 6, 3, 5, 4, False, None, False, False),
    ("mingru_l2", 2, 6, 3, 5, 4, True, None, False, False),
    ("mingru_lengths", 1, 6, 3, 5, 4, True, [3, 6, 1], False, False),
    ("mingru_bf", 1, 6, 3, 5, 4, True, None, True, False),
    ("mingru_l2_lengths_bf_noh0", 2, 6, 3, 5, 4, False, [6, 1, 4], True, False),
    ("mingru_log", 1, 6, 3, 5, 4, True, None, False, True),
    ("mingru_log_noh0", 1, 6, 3, 5, 4, False, None, False, True),
    ("mingru_log_l2_lengths", 2, 6, 3, 5, 4, True, [2, 6, 1], False, True),
]


def mingru_case(name, L, T, N, I, H, has_h0, lengths, bf, log_space, dtype):
    dt = DTYPES[dtype]
    seed = seeded(name)
    m = MinGRURef(I, H, L, batch_first=bf, log_space=log_space)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(as_input(p, dt))
    x = as_input(torch.randn((N, T, I) if bf else (T, N, I), dtype=F64), dt).requires_grad_(True)
    h0 = as_input(torch.randn(L, N, H, dtype=F64), dt).requires_grad_(True) if has_h0 else None
    lens = None
    if lengths is not None:
        lens = torch.tensor(lengths, dtype=torch.int64)
        assert lens.shape == (N,) and int(lens.min()) == 1 and int(lens.max()) == T
    out, h_n = m(x, h0, lens)
    dout = as_input(torch.randn(out.shape, dtype=F64), dt)
    dhn = as_input(torch.randn(h_n.shape, dtype=F64), dt)
    keys = [f"{p}_l{k}" for k in range(L) for p in ("weight", "bias")]
    params = dict(m.named_parameters())
    leaves = [x] + ([h0] if has_h0 else []) + [params[k] for k in keys]
    grads = torch.autograd.grad((out * dout).sum() + (h_n * dhn).sum(), leaves)
    t = {"input": x, "output": out, "h_n": h_n, "doutput": dout, "dh_n": dhn,
         "d_input": grads[0],
         "batch_first": torch.tensor(int(bf), dtype=torch.int64),
         "log_space": torch.tensor(int(log_space), dtype=torch.int64)}
    if has_h0:
        t["h0"] = h0
        t["d_h0"] = grads[1]
    if lens is not None:
        t["lengths"] = lens
        # padded positions: output exactly 0, d_input exactly 0
        for n in range(N):
            sl = (n, slice(int(lens[n]), None)) if bf else (slice(int(lens[n]), None), n)
            assert bool((out[sl] == 0).all()) and bool((grads[0][sl] == 0).all())
    for k, gk in zip(keys, grads[1 + has_h0:]):
        t[k] = params[k]
        t["d_" + k] = gk
    for k, v in t.items():
        assert bool(torch.isfinite(v.detach()).all()), (name, k)
    config = dict(kind="mingru", log_space=log_space, num_layers=L, input_size=I,
                  hidden_size=H, batch_first=bf, has_h0=has_h0, has_lengths=lens is not None,
                  T=T, N=N, dtype=dtype,
                  note=f"seed={seed}; sequential f64 reference; weights U(+-1/sqrt(fan_in)); "
                       "input, h0, doutput, dh_n randn"
                       + (f"; lengths {lengths}" if lengths else "")
                       + ("; h0 = g(h0) (0.5 if absent)" if log_space else "; h0 = 0 if absent"))
    return finish(t, dt, config)


# --------------------------------------------------------------------------- driver
def all_cases():
    """(file name, thunk) for every file."""
    cases = []
    for op in EW_OPS:
        for case, shape, dim, dtypes, ops in EW_CASES:
            if op in ops:
                for dtype in dtypes:
                    cases.append((f"{op}_{case}_{dtype}",
                                  lambda op=op, case=case, shape=shape, dim=dim, dtype=dtype:
                                  elementwise_case(op, case, shape, dim, dtype)))
    for dtype in DTYPES:
        cases.append((f"logcumsumexp_inf_{dtype}",
                      lambda dtype=dtype: logcumsumexp_inf_case(dtype)))
    for dtype in DTYPES:
        for T, N, C in ((1, 2, 3), (7, 2, 3), (300, 1, 2)):
            cases.append((f"affine_diag_t{T}_{dtype}", lambda T=T, N=N, C=C, dtype=dtype:
                          affine_grad_case("affine_diag", T, N, C, dtype)))
        for T, N in ((1, 2), (5, 2), (33, 1)):
            cases.append((f"affine_matrix_t{T}_{dtype}", lambda T=T, N=N, dtype=dtype:
                          affine_grad_case("affine_matrix", T, N, 4, dtype)))
        cases.append((f"affine_log_{dtype}", lambda dtype=dtype: affine_log_case(
            "affine_log", 500, 1, 0.5, 1.0, 0.1, 1.0, dtype)))
        if dtype == "f32":
            cases.append((f"affine_log_long_{dtype}", lambda dtype=dtype: affine_log_case(
                "affine_log_long", 2000, 1, 0.88, 0.92, 0.05, 0.15, dtype)))
        for d, Ts in ((3, (1, 7, 100)), (8, (7, 17))):
            for T in Ts:
                cases.append((f"matmul_t{T}_d{d}_{dtype}",
                              lambda T=T, d=d, dtype=dtype: matmul_case(T, d, dtype)))
        for c in MINGRU_CASES:
            cases.append((f"{c[0]}_{dtype}", lambda c=c, dtype=dtype: mingru_case(*c, dtype)))
    return cases


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(OUT_DIR, exist_ok=True)
    cases = all_cases()
    names = [n for n, _ in cases]
    assert len(names) == len(set(names)), "duplicate case names"
    total = 0
    root = os.path.dirname(os.path.dirname(HERE))
    for name, make in cases:
        data = make()
        path = os.path.join(OUT_DIR, name + ".safetensors")
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        total += len(data)
        print(f"{len(data):9d}  {os.path.relpath(path, root)}")
    print(f"{total:9d}  total bytes in {len(cases)} files")
    stale = sorted(set(f for f in os.listdir(OUT_DIR) if f.endswith(".safetensors"))
                   - set(n + ".safetensors" for n in names))
    if stale:
        print("warning: files not produced by this script: " + ", ".join(stale), file=sys.stderr)
    if total >= SIZE_LIMIT:
        print(f"error: {total} bytes, over the {SIZE_LIMIT} byte budget", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
