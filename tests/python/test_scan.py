"""grux.prefix_scan, grux.reduce_scan and grux.linear_recurrence against torch references
(cumsum, cumprod, cummax, cummin, logcumsumexp, loops of matmuls, a Python loop for the
recurrence) and torch.autograd.gradcheck; Python callables, errors, the GIL."""
import operator
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

import grux
from gil_check import ticks_during

# f64: a handful of roundings on values of order 1 (products of up to 6 factors in [0.5, 1.5],
# sums of up to 6 normals). f32: eps32 = 1.2e-7 times the scan length (<= 6) times the values'
# size (<= ~10) stays below 1e-5.
TOL = {np.float32: 1e-5, np.float64: 1e-12}

ELEMENTWISE = ["add", "mul", "max", "min", "logaddexp"]
NP_FUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum,
            "logaddexp": np.logaddexp, "matmul": np.matmul}
TORCH_FUNCS = {"add": torch.add, "mul": torch.mul, "max": torch.maximum, "min": torch.minimum,
               "logaddexp": torch.logaddexp, "matmul": torch.matmul}
IDENTITY = {"add": 0.0, "mul": 1.0, "max": -np.inf, "min": np.inf, "logaddexp": -np.inf}


def sample(name, dtype, seed=0):
    """Test data: (3, 4, 2, 5, 3) element-wise (mul: factors near 1), (3, 4, 5, 2, 2)
    matrices near the identity for matmul (products stay of order 1)."""
    rng = np.random.default_rng(seed)
    if name == "matmul":
        return (np.eye(2) + 0.4 * rng.standard_normal((3, 4, 5, 2, 2))).astype(dtype)
    if name == "mul":
        return rng.uniform(0.5, 1.5, (3, 4, 2, 5, 3)).astype(dtype)
    return rng.standard_normal((3, 4, 2, 5, 3)).astype(dtype)


def reference(x, name, dim, exclusive=False, reverse=False):
    """The scan in float64 torch: torch's cumulative ops (flipped for reverse, shifted in the
    identity for exclusive), a loop of matmuls for matmul."""
    t = torch.from_numpy(np.asarray(x, np.float64))
    dim = dim % t.dim()
    if name == "matmul":
        m = t.movedim(dim, 0)
        out = [None] * m.shape[0]
        order = range(m.shape[0] - 1, -1, -1) if reverse else range(m.shape[0])
        acc = None
        for i in order:
            acc = m[i] if acc is None else (m[i] @ acc if reverse else acc @ m[i])
            out[i] = acc
        return torch.stack(out).movedim(0, dim).numpy()
    if reverse:
        t = t.flip(dim)
    y = {"add": lambda: torch.cumsum(t, dim), "mul": lambda: torch.cumprod(t, dim),
         "max": lambda: torch.cummax(t, dim).values, "min": lambda: torch.cummin(t, dim).values,
         "logaddexp": lambda: torch.logcumsumexp(t, dim)}[name]()
    if exclusive:
        e = torch.full_like(t.narrow(dim, 0, 1), IDENTITY[name])
        y = torch.cat([e, y.narrow(dim, 0, t.shape[dim] - 1)], dim)
    if reverse:
        y = y.flip(dim)
    return y.numpy()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ELEMENTWISE + ["matmul"])
@pytest.mark.parametrize("dim", [0, 1, -1, -3])
@pytest.mark.parametrize("exclusive,reverse", [(False, False), (True, False), (False, True),
                                               (True, True)])
def test_builtins_match_torch(name, dtype, dim, exclusive, reverse):
    x = sample(name, dtype)
    spellings = [(x, name), (x, NP_FUNCS[name]), (torch.from_numpy(x), TORCH_FUNCS[name])]
    if name in ("add", "mul", "matmul"):
        spellings.append((x, {"add": operator.add, "mul": operator.mul,
                              "matmul": operator.matmul}[name]))
    if name == "matmul" and (exclusive or dim == -1):
        # No exclusive form (no identity of unknown size); dim -1 is a matrix dimension.
        for xi, f in spellings:
            with pytest.raises(grux.Error, match="inclusive only|matrix dimension"):
                grux.prefix_scan(xi, f, dim, exclusive=exclusive, reverse=reverse)
        return
    want = reference(x, name, dim, exclusive, reverse)
    for xi, f in spellings:
        y = grux.prefix_scan(xi, f, dim, exclusive=exclusive, reverse=reverse)
        assert type(y) is type(xi) and y.dtype == xi.dtype and tuple(y.shape) == x.shape
        np.testing.assert_allclose(np.asarray(y), want, rtol=TOL[dtype], atol=TOL[dtype],
                                   err_msg=f"{f}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ELEMENTWISE + ["matmul"])
@pytest.mark.parametrize("dim", [0, 1, -3])
def test_reduce_matches_torch(name, dtype, dim):
    x = sample(name, dtype, seed=1)
    want = np.take(reference(x, name, dim), -1, axis=dim)  # the last row of the scan
    for xi, f in [(x, name), (x, NP_FUNCS[name]), (torch.from_numpy(x), TORCH_FUNCS[name])]:
        y = grux.reduce_scan(xi, f, dim)
        assert type(y) is type(xi) and y.dtype == xi.dtype
        np.testing.assert_allclose(np.asarray(y), want, rtol=TOL[dtype], atol=TOL[dtype])
    # torch's own reductions, as a second reference.
    t = torch.from_numpy(x.astype(np.float64))
    direct = {"add": lambda: t.sum(dim), "mul": lambda: t.prod(dim),
              "max": lambda: t.amax(dim), "min": lambda: t.amin(dim),
              "logaddexp": lambda: torch.logsumexp(t, dim)}
    if name in direct:
        np.testing.assert_allclose(grux.reduce_scan(x, name, dim), direct[name]().numpy(),
                                   rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reverse", [False, True])
def test_python_callable_equals_builtin(dtype, reverse):
    x = sample("matmul", dtype, seed=2)
    seen = []

    def product(a, b):  # non-commutative: operand order matters
        seen.append(type(a))
        return a @ b

    for dim in (0, 2):
        builtin = grux.prefix_scan(x, "matmul", dim, reverse=reverse)
        got = grux.prefix_scan(x, product, dim, reverse=reverse)
        # The same matrix products in the same order: identical up to the kernel's summation
        # order within one 2x2 product.
        np.testing.assert_allclose(got, builtin, rtol=TOL[dtype], atol=TOL[dtype])
        np.testing.assert_allclose(grux.reduce_scan(x, product, dim),
                                   grux.reduce_scan(x, "matmul", dim), rtol=TOL[dtype],
                                   atol=TOL[dtype])
    assert seen and all(t is np.ndarray for t in seen)
    # torch in: the callable sees torch tensors and the result is a torch tensor.
    seen.clear()
    t = torch.from_numpy(x)
    got = grux.prefix_scan(t, product, 1, reverse=reverse)
    assert isinstance(got, torch.Tensor) and got.dtype == t.dtype
    assert seen and all(s is torch.Tensor for s in seen)
    np.testing.assert_allclose(got.numpy(), grux.prefix_scan(x, "matmul", 1, reverse=reverse),
                               rtol=TOL[dtype], atol=TOL[dtype])


def test_callable_operand_order_and_scalars():
    x = np.array([3.0, 1.0, 4.0, 1.0, 5.0])  # 0-d slices: numpy returns scalars, accepted
    first, last = (lambda a, b: a), (lambda a, b: b)  # associative, not commutative
    np.testing.assert_array_equal(grux.prefix_scan(x, first, 0), [3, 3, 3, 3, 3])
    np.testing.assert_array_equal(grux.prefix_scan(x, last, 0), x)
    np.testing.assert_array_equal(grux.prefix_scan(x, first, 0, reverse=True), x)
    np.testing.assert_array_equal(grux.prefix_scan(x, last, 0, reverse=True), [5, 5, 5, 5, 5])
    np.testing.assert_array_equal(grux.reduce_scan(x, first, 0), 3.0)
    # torch_parallel_scan's pad_value is accepted (grux does not pad) and changes nothing.
    np.testing.assert_array_equal(grux.prefix_scan(x, last, 0, 7.0), x)
    np.testing.assert_array_equal(grux.prefix_scan(x, lambda a, b: np.maximum(a, b), 0),
                                  grux.prefix_scan(x, "max", 0))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ELEMENTWISE)
def test_exclusive_callable_with_identity(name, dtype):
    x = sample(name, dtype, seed=3)
    fn = NP_FUNCS[name]
    for reverse in (False, True):
        want = reference(x, name, 1, exclusive=True, reverse=reverse)
        # A lambda is not mapped to the built-in: this runs the callable path.
        got = grux.prefix_scan(x, lambda a, b: fn(a, b), 1, exclusive=True, reverse=reverse,
                               identity=IDENTITY[name])
        np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype])
        # identity as a full slice (a torch tensor is accepted too).
        e = torch.full((3, 2, 5, 3), IDENTITY[name], dtype=torch.float64)
        got = grux.prefix_scan(torch.from_numpy(x), lambda a, b: TORCH_FUNCS[name](a, b), 1,
                               exclusive=True, reverse=reverse, identity=e)
        np.testing.assert_allclose(got.numpy(), want, rtol=TOL[dtype], atol=TOL[dtype])


class Boom(Exception):
    pass


@pytest.mark.parametrize("use_torch", [False, True])
def test_callable_exception_propagates(use_torch):
    x = np.ones((6, 3))
    calls = []

    def fails_on_third(a, b):
        calls.append(1)
        if len(calls) == 3:
            raise Boom("third call", 42)
        return a + b

    xi = torch.from_numpy(x) if use_torch else x
    with pytest.raises(Boom) as info:
        grux.prefix_scan(xi, fails_on_third, 0)
    assert info.value.args == ("third call", 42) and len(calls) == 3  # stopped at once
    calls.clear()
    with pytest.raises(Boom):
        grux.reduce_scan(xi, fails_on_third, 0)
    with pytest.raises(ZeroDivisionError):
        grux.prefix_scan(xi, lambda a, b: 1 / 0, 0)
    # The interpreter is fine afterwards.
    np.testing.assert_array_equal(np.asarray(grux.prefix_scan(xi, lambda a, b: a + b, 0)),
                                  np.cumsum(x, 0))


def test_callable_bad_results():
    x = np.ones((4, 3))
    with pytest.raises(grux.Error, match=r"prefix_func: the function returned shape \(2,\) "
                                         r"float64, expected \(3,\) float64"):
        grux.prefix_scan(x, lambda a, b: a[:2], 0)
    with pytest.raises(grux.Error, match=r"returned shape \(3,\) float32, expected \(3,\) float64"):
        grux.prefix_scan(x, lambda a, b: (a + b).astype(np.float32), 0)
    with pytest.raises(grux.Error, match=r"reduce_func: the function returned shape \(3, 3\)"):
        grux.reduce_scan(x, lambda a, b: np.outer(a, b), 0)
    with pytest.raises(grux.Error, match=r"returned <class 'str'>, expected an array of shape"):
        grux.prefix_scan(x, lambda a, b: "x", 0)
    with pytest.raises(grux.Error, match=r"returned <class 'NoneType'>"):
        grux.prefix_scan(torch.ones(4, 3), lambda a, b: None, 0)
    # Operands of NumPy input are read-only views of x: writing to them fails, x unchanged.
    with pytest.raises(ValueError, match="read-only"):
        grux.prefix_scan(x, lambda a, b: operator.iadd(a, b), 0)
    np.testing.assert_array_equal(x, np.ones((4, 3)))


def test_result_types_and_strided_inputs():
    rng = np.random.default_rng(4)
    base = rng.standard_normal((8, 6, 10))
    strided = base[:, ::2, ::3]  # not contiguous
    transposed = base.transpose(2, 0, 1)
    for x in (strided, transposed, base[::-1]):
        want = np.cumsum(x, 1)
        for f in ("add", lambda a, b: a + b):
            y = grux.prefix_scan(x, f, 1)
            assert isinstance(y, np.ndarray) and y.shape == x.shape
            assert not np.shares_memory(y, base)  # a new array; x is not written
            np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)
    t = torch.from_numpy(base).transpose(0, 2)
    y = grux.prefix_scan(t, "max", 0)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float64
    np.testing.assert_array_equal(y.numpy(), torch.cummax(t, 0).values.numpy())
    # torch float32 in, torch float32 out; lists are taken (as float32 for integers).
    t32 = torch.arange(5, dtype=torch.float32)
    assert grux.prefix_scan(t32, "add", 0).dtype == torch.float32
    np.testing.assert_array_equal(grux.prefix_scan([1, 2, 3], "add", 0), [1, 3, 6])
    # Reduce: one slice, of the input's type; a 1-D input gives a 0-d result.
    r = grux.reduce_scan(torch.from_numpy(base), "add", 1)
    assert isinstance(r, torch.Tensor) and tuple(r.shape) == (8, 10)
    assert grux.reduce_scan(np.arange(1.0, 5.0), "mul", 0).shape == ()
    assert float(grux.reduce_scan(np.arange(1.0, 5.0), "mul", 0)) == 24.0


@pytest.mark.parametrize("call,message", [
    (lambda: grux.prefix_scan(np.ones(3), "sum_of", 0),
     r"prefix_func: unknown scan function 'sum_of'; expected one of add, mul, max, min, "
     r"logaddexp, matmul or a callable"),
    (lambda: grux.reduce_scan(np.ones(3), "plus", 0), r"reduce_func: unknown scan function"),
    (lambda: grux.prefix_scan(np.ones(3), 3, 0), r"prefix_func: expected a callable .* got int"),
    (lambda: grux.prefix_scan(np.ones((2, 3)), "add", 2), r"dim 2 out of range .* rank 2"),
    (lambda: grux.prefix_scan(np.ones((2, 3)), "add", -3), r"dim -3 out of range"),
    (lambda: grux.prefix_scan(np.ones((2, 3)), lambda a, b: a, 5), r"dim 5 out of range"),
    (lambda: grux.reduce_scan(np.ones((2, 3)), "max", 2), r"dim 2 out of range"),
    (lambda: grux.prefix_scan(np.ones((2, 3), np.int64), "add", 0),
     r"x: dtype int64 is not supported \(expected float32 or float64\)"),
    (lambda: grux.prefix_scan(torch.ones(3, dtype=torch.int32), "add", 0),
     r"x: dtype torch.int32 is not supported"),
    (lambda: grux.prefix_scan(np.ones(3, np.float16), lambda a, b: a, 0),
     r"x: dtype float16 is not supported"),
    (lambda: grux.prefix_scan(np.float64(1.0), "add", 0), r"scalar"),
    (lambda: grux.prefix_scan(np.ones((2, 3)), lambda a, b: a + b, 0, exclusive=True),
     r"identity: an exclusive scan with a Python callable needs identity="),
    (lambda: grux.prefix_scan(np.ones((2, 3)), np.add, 0, exclusive=True, identity=0.0),
     r"identity: prefix_func is the built-in 'add', which knows its identity"),
    (lambda: grux.prefix_scan(np.ones((2, 3)), lambda a, b: a + b, 0, exclusive=True,
                              identity=np.zeros(2)),
     r"identity: shape \(2,\) does not broadcast to one slice of x, \(3,\)"),
    (lambda: grux.prefix_scan(np.ones((4, 2, 3)), "matmul", 0), r"square matrices"),
    (lambda: grux.reduce_scan(np.ones((0, 3)), "add", 0), r"length 0"),
    (lambda: grux.reduce_scan(np.ones((0, 3)), lambda a, b: a, 0), r"length 0"),
    (lambda: grux.prefix_scan(np.ones(3), "add", 0, threads=-1), r"threads is -1"),
])
def test_errors(call, message):
    with pytest.raises(grux.Error, match=message):
        call()




def test_gil_released_while_scanning():
    x = np.random.default_rng(5).standard_normal(1 << 22)
    n, alone = ticks_during(lambda: grux.prefix_scan(x, "logaddexp", 0, threads=1))
    assert alone > 0.02, "problem too small to observe the GIL"
    # While grux ran, the other thread kept ticking (it would be frozen if the GIL were held).
    assert n >= 5, f"{n} ticks"
    a = np.full((1 << 22, 2), 0.5)
    n, alone = ticks_during(lambda: grux.linear_recurrence(a, a, threads=1))
    assert alone > 0.005 and n >= 2, f"{n} ticks in {alone:.3f} s"


def test_python_callables_in_several_threads():
    # Each scan releases the GIL and takes it back per call: two threads running callable
    # scans at once (and the main thread waiting) neither deadlock nor mix results.
    x = np.random.default_rng(6).standard_normal((2000, 3))
    results, errors = {}, []

    def work(k):
        try:
            results[k] = grux.prefix_scan(x * k, lambda a, b: a + b, 0)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in (1.0, 2.0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors and not any(t.is_alive() for t in threads)
    for k in (1.0, 2.0):
        np.testing.assert_allclose(results[k], np.cumsum(x * k, 0), rtol=1e-12, atol=1e-10)


# ---- linear_recurrence ---------------------------------------------------------------------

def recurrence_loop(a, b, h0=None, dim=0, reverse=False, matrix=False):
    """h_t = a_t h_{t-1} + b_t in plain torch (differentiable), time along dim."""
    a, b = a.movedim(dim, 0), b.movedim(dim, 0)
    h = torch.zeros_like(b[0]) if h0 is None else h0
    out = [None] * b.shape[0]
    for t in (range(b.shape[0] - 1, -1, -1) if reverse else range(b.shape[0])):
        h = (a[t] @ h.unsqueeze(-1)).squeeze(-1) + b[t] if matrix else a[t] * h + b[t]
        out[t] = h
    return torch.stack(out).movedim(0, dim)


def recurrence_inputs(matrix, dim, dtype=torch.float64, seed=7):
    """b (2, 5, 3) with time at dim (0 or 1); a like b, or b's shape + (3,) (scaled to keep
    the products bounded); h0 b's shape without dim. Positive, so log_space applies."""
    g = torch.Generator().manual_seed(seed)
    shape = [5, 2, 3] if dim == 0 else [2, 5, 3]
    b = torch.rand(shape, generator=g, dtype=dtype) + 0.1
    a = (torch.rand(shape + ([3] if matrix else []), generator=g, dtype=dtype) + 0.1) * (
        0.4 if matrix else 1.0)
    h0_shape = shape[:dim] + shape[dim + 1:]
    h0 = torch.rand(h0_shape, generator=g, dtype=dtype) + 0.1
    return a, b, h0


@pytest.mark.parametrize("matrix", [False, True])
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("with_h0", [False, True])
def test_linear_recurrence_matches_loop(matrix, dim, reverse, with_h0):
    a, b, h0 = recurrence_inputs(matrix, dim)
    h0 = h0 if with_h0 else None
    want = recurrence_loop(a, b, h0, dim, reverse, matrix).numpy()
    # numpy in -> numpy out; torch in -> torch out; f64 recurrences of 5 steps: ~1e-15.
    got = grux.linear_recurrence(a.numpy(), b.numpy(), None if h0 is None else h0.numpy(),
                                 dim=dim, reverse=reverse)
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    got_t = grux.linear_recurrence(a, b, h0, dim=dim, reverse=reverse)
    assert isinstance(got_t, torch.Tensor) and not got_t.requires_grad
    np.testing.assert_allclose(got_t.numpy(), want, rtol=1e-12, atol=1e-12)
    if not matrix:  # log space: the same function computed through logs
        got_log = grux.linear_recurrence(a, b, h0, dim=dim, reverse=reverse, log_space=True)
        np.testing.assert_allclose(got_log.numpy(), want, rtol=1e-12, atol=1e-12)
    # float32: 5 steps of values of order 1.
    got32 = grux.linear_recurrence(a.float(), b.float(), None if h0 is None else h0.float(),
                                   dim=dim, reverse=reverse)
    assert got32.dtype == torch.float32
    np.testing.assert_allclose(got32.numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("matrix,log_space", [(False, False), (False, True), (True, False)])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("with_h0", [False, True])
def test_linear_recurrence_gradcheck(matrix, reverse, with_h0, log_space):
    a, b, h0 = recurrence_inputs(matrix, 1, seed=8)
    inputs = [a.requires_grad_(), b.requires_grad_()] + ([h0.requires_grad_()] if with_h0 else [])

    def f(a, b, h0=None):
        return grux.linear_recurrence(a, b, h0, dim=1, reverse=reverse, log_space=log_space)

    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-8, rtol=1e-6)
    # The same gradients as autograd through the plain loop (f64: ~1e-15 per step).
    w = torch.randn(2, 5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    got = torch.autograd.grad((f(*inputs) * w).sum(), inputs)
    want = torch.autograd.grad((recurrence_loop(*inputs[:2], inputs[2] if with_h0 else None, 1,
                                                reverse, matrix) * w).sum(), inputs)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-12, atol=1e-12)


def test_linear_recurrence_grad_some_inputs():
    # Only b requires grad (a is a NumPy array): b gets its gradient, a none; the upstream
    # gradient of a sum is a zero-strided expanded tensor, which grux reads as it lies.
    a, b, h0 = recurrence_inputs(False, 0, seed=10)
    b.requires_grad_()
    h = grux.linear_recurrence(a.numpy(), b, h0)
    assert isinstance(h, torch.Tensor) and h.requires_grad
    h.sum().backward()
    bl = b.detach().clone().requires_grad_()
    recurrence_loop(a, bl, h0).sum().backward()
    np.testing.assert_allclose(b.grad.numpy(), bl.grad.numpy(), rtol=1e-12, atol=1e-12)
    with torch.no_grad():  # no graph under no_grad
        assert not grux.linear_recurrence(a, b, h0).requires_grad
    # No second derivatives: asking for them is an error, not a silent zero.
    (g,) = torch.autograd.grad(grux.linear_recurrence(a, b, h0).square().sum(), b,
                               create_graph=True)
    (want,) = torch.autograd.grad(recurrence_loop(a, b, h0).square().sum(), b)
    np.testing.assert_allclose(g.detach().numpy(), want.numpy(), rtol=1e-12, atol=1e-12)
    with pytest.raises(grux.Error, match="gradients of its gradients are not supported"):
        g.sum().backward()


@pytest.mark.parametrize("call,message", [
    (lambda: grux.linear_recurrence(np.ones((4, 3)), np.ones((4, 2))), r"a has shape \(4, 3\)"),
    (lambda: grux.linear_recurrence(np.ones((4, 3, 3)), np.ones((4, 3)), dim=1),
     r"state dimension"),
    (lambda: grux.linear_recurrence(np.ones((4, 3)), np.ones((4, 3)), np.ones(2)),
     r"h0 has shape \(2,\); expected \(3,\)"),
    (lambda: grux.linear_recurrence(np.ones((4, 3), np.float32), np.ones((4, 3))),
     r"b has dtype f64 but a has dtype f32"),
    (lambda: grux.linear_recurrence(np.ones((4, 3)), np.ones((4, 3)), dim=2), r"out of range"),
    (lambda: grux.linear_recurrence(-np.ones((4, 3)), np.ones((4, 3)), log_space=True),
     r"log space needs a, b and h0 > 0; a\[0, 0\] = -1"),
    (lambda: grux.linear_recurrence(np.ones((4, 3, 3)), np.ones((4, 3)), log_space=True),
     r"log space needs the diagonal form"),
    (lambda: grux.linear_recurrence(np.ones((4, 3), np.int64), np.ones((4, 3))),
     r"a: dtype int64 is not supported"),
])
def test_linear_recurrence_errors(call, message):
    with pytest.raises(grux.Error, match=message):
        call()


def test_torch_not_imported_by_scans():
    # Known callables are matched only against modules already loaded: NumPy users do not
    # pay for importing torch.
    code = ("import sys, numpy as np, grux\n"
            "y = grux.prefix_scan(np.arange(4.0), np.add, 0)\n"
            "h = grux.linear_recurrence(np.ones(4), np.ones(4))\n"
            "assert list(y) == [0, 1, 3, 6] and list(h) == [1, 2, 3, 4], (y, h)\n"
            "assert 'torch' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.parametrize("scan", ["prefix", "reduce"])
def test_scans_refuse_inputs_that_require_grad(scan):
    """No backward: a tensor that wants one is refused, not given a result without gradient."""
    x = torch.randn(5, 3, requires_grad=True)
    f = (lambda v: grux.prefix_scan(v, "add", 0)) if scan == "prefix" else \
        (lambda v: grux.reduce_scan(v, "add", 0))
    with pytest.raises(grux.Error, match=f"{scan}_scan has no gradient"):
        f(x)
    with torch.no_grad():
        torch.testing.assert_close(f(x), x.detach().cumsum(0) if scan == "prefix" else x.detach().sum(0))
    torch.testing.assert_close(f(x.detach()), f(x.detach()))
