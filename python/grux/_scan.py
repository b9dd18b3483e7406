"""Scans on NumPy arrays and CPU torch tensors: prefix_scan and reduce_scan (any associative
combine; the built-in ones run grux's own kernels) and linear_recurrence (h_t = a_t h_{t-1} +
b_t, diagonal or matrix a_t, with torch autograd)."""
import operator

import numpy as np

from . import _grux
from ._grux import Error
from ._util import _optional, _to_numpy, _torch

__all__ = ["prefix_scan", "reduce_scan", "linear_recurrence"]

# The built-in names and grux's kernel for each.
_NAMES = {"add": "sum", "mul": "prod", "max": "max", "min": "min", "logaddexp": "logaddexp",
          "matmul": "matmul"}


def _known_callables():
    """(callable, kernel) pairs; torch's only when the user has imported torch."""
    known = [(operator.add, "sum"), (operator.mul, "prod"), (operator.matmul, "matmul"),
             (np.add, "sum"), (np.multiply, "prod"), (np.maximum, "max"), (np.minimum, "min"),
             (np.logaddexp, "logaddexp"), (np.matmul, "matmul")]
    torch = _torch()
    if torch is not None:
        known += [(torch.add, "sum"), (torch.mul, "prod"), (torch.maximum, "max"),
                  (torch.minimum, "min"), (torch.logaddexp, "logaddexp"),
                  (torch.matmul, "matmul")]
    return known


def _kernel(func, name):
    """grux's kernel name for func (a built-in name or a known callable), or None for any
    other callable."""
    if isinstance(func, str):
        if func in _NAMES:
            return _NAMES[func]
        raise Error(f"{name}: unknown scan function {func!r}; expected one of "
                    f"{', '.join(_NAMES)} or a callable")
    for f, kernel in _known_callables():
        if func is f:
            return kernel
    if not callable(func):
        raise Error(f"{name}: expected a callable or one of {', '.join(_NAMES)}, got "
                    f"{type(func).__name__}")
    return None


def _is_torch(x):
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def _python_combine(func, torch_input):
    """(the function grux calls with NumPy operands, whether the operands are read-only)."""
    if not torch_input:
        return func, True  # NumPy operands: views of x, read-only
    torch = _torch()

    # torch cannot express read-only memory, so these operands are writable views.
    def call(earlier, later):
        r = func(torch.from_numpy(earlier), torch.from_numpy(later))
        return r.detach().numpy() if isinstance(r, torch.Tensor) else r
    return call, False


def _refuse_grad(x, what):
    """prefix_scan and reduce_scan have no backward: refuse a tensor that wants one rather than
    return a result whose gradient would silently be missing."""
    torch = _torch()
    if torch is not None and isinstance(x, torch.Tensor) and x.requires_grad and \
            torch.is_grad_enabled():
        raise Error(f"x: {what} has no gradient, and x requires grad (detach it, run under "
                    "torch.no_grad(), or use linear_recurrence, which has one)")


def _identity(identity, x, dim):
    """identity as one contiguous slice of x (broadcast, cast to x's dtype)."""
    e = _to_numpy(identity, "identity")[0]
    if not -x.ndim <= dim < x.ndim:
        return e  # the scan reports the bad dim
    shape = x.shape[:dim % x.ndim] + x.shape[dim % x.ndim + 1:]
    try:
        return np.ascontiguousarray(np.broadcast_to(e.astype(x.dtype, copy=False), shape))
    except ValueError:
        raise Error(f"identity: shape {e.shape} does not broadcast to one slice of x, "
                    f"{shape}") from None


def prefix_scan(x, prefix_func, dim, pad_value=None, *, exclusive=False, reverse=False,
                identity=None, threads=0):
    """The inclusive (or exclusive) scan of x along dim: y_t = x_0 . x_1 . ... . x_t.

    x: a float32 or float64 NumPy array or CPU torch tensor; y has x's shape, dtype and type
    (a new array; x is read in place when its strides allow, else copied once).
    prefix_func, the combine a . b = prefix_func(a, b), associative:
      - "add", "mul", "max", "min", "logaddexp", "matmul", or a known callable: torch.add,
        torch.mul, torch.maximum, torch.minimum, torch.logaddexp, torch.matmul, np.add,
        np.multiply, np.maximum, np.minimum, np.logaddexp, np.matmul, operator.add,
        operator.mul, operator.matmul. These run grux's own kernels (multithreaded; threads: 0
        lets grux choose). "matmul" needs x of shape (..., d, d) with dim before the last two
        and gives y_t = x_0 @ ... @ x_t; it has no exclusive form.
      - any other callable f(earlier, later), binary, associative and shape-preserving: called
        with slices of x along dim (x.select(dim, t)-shaped) of x's type (read-only NumPy
        views for NumPy x, torch tensors for torch x; it must not write to them) and must
        return the slice's shape and dtype, else grux.Error. It runs on one thread; an
        exception it raises propagates unchanged.
    dim: negative counts from the end. exclusive: y_t = e . x_0 . ... . x_{t-1} (y_0 = e, the
    identity: known for the built-ins; a callable needs identity=, a scalar or array
    broadcastable to one slice). reverse: y_t = x_t . x_{t+1} . ... . x_{T-1} (operand order
    kept). pad_value: accepted for torch_parallel_scan's signature and unused (grux does not
    pad). The options after it are keyword-only. No autograd: a torch x that requires grad (with
    grad enabled) is refused with grux.Error.
    """
    _refuse_grad(x, "prefix_scan")
    xa, wrap = _to_numpy(x, "x")
    kernel = _kernel(prefix_func, "prefix_func")
    if kernel is not None:
        if identity is not None:
            builtin = next(k for k, v in _NAMES.items() if v == kernel)
            raise Error(f"identity: prefix_func is the built-in '{builtin}', which knows its "
                        "identity; pass identity=None")
        return wrap(_grux.prefix_scan(xa, int(dim), kernel, bool(exclusive), bool(reverse),
                                      int(threads)))
    if exclusive and identity is None:
        raise Error("identity: an exclusive scan with a Python callable needs identity= (e with "
                    "e . v == v, broadcastable to one slice of x); none was given")
    e = None if identity is None else _identity(identity, xa, int(dim))
    fn, readonly = _python_combine(prefix_func, _is_torch(x))
    return wrap(_grux.prefix_scan_callable(xa, int(dim), fn, "prefix_func", bool(exclusive),
                                           bool(reverse), e, readonly))


def reduce_scan(x, reduce_func, dim, *, threads=0):
    """x_0 . x_1 . ... . x_{T-1} along dim: one slice of x (x's shape without dim), of x's
    dtype and type. reduce_func as prefix_scan's prefix_func; T must be >= 1. No autograd (as
    prefix_scan)."""
    _refuse_grad(x, "reduce_scan")
    xa, wrap = _to_numpy(x, "x")
    kernel = _kernel(reduce_func, "reduce_func")
    if kernel is not None:
        return wrap(_grux.reduce_scan(xa, int(dim), kernel, int(threads)))
    fn, readonly = _python_combine(reduce_func, _is_torch(x))
    return wrap(_grux.reduce_scan_callable(xa, int(dim), fn, "reduce_func", readonly))


_functions = None


def _autograd_functions():
    """The torch.autograd.Functions, made on first use (torch is imported only by users who
    pass tensors)."""
    global _functions
    if _functions is not None:
        return _functions
    import torch

    class NotTwiceDifferentiable(torch.autograd.Function):
        """Passes first-order gradients through; differentiating them again raises (grux's
        backward is not itself differentiable, so a second derivative would be wrong)."""

        @staticmethod
        def forward(ctx, n, *tensors):
            return tuple(t.clone() for t in tensors[:n])  # the rest only links the graph

        @staticmethod
        def backward(ctx, *grads):
            raise Error("linear_recurrence: gradients of its gradients are not supported "
                        "(grux's backward is not differentiable)")

    class LinearRecurrence(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b, h0, dim, reverse, log_space, threads):
            a_np, b_np = _to_numpy(a, "a")[0], _to_numpy(b, "b")[0]
            h0_np = _optional(h0, "h0")
            h = torch.from_numpy(_grux.affine_scan(a_np, b_np, dim, h0_np, reverse, log_space,
                                                   threads))
            ctx.options = (dim, reverse, log_space, threads)
            ctx.save_for_backward(a if _is_torch(a) else torch.from_numpy(a_np),
                                  None if h0 is None else
                                  (h0 if _is_torch(h0) else torch.from_numpy(h0_np)), h)
            return h

        @staticmethod
        def backward(ctx, grad_h):
            a, h0, h = ctx.saved_tensors
            grads = _grux.affine_scan_backward(
                a.detach().numpy(), None if h0 is None else h0.detach().numpy(),
                h.detach().numpy(), _to_numpy(grad_h, "grad_h")[0], *ctx.options)
            need = ctx.needs_input_grad[:3]
            grads = [torch.from_numpy(g) if n else None for g, n in zip(grads, need)]
            if torch.is_grad_enabled():  # create_graph=True: make a second backward raise
                given = [g for g in grads if g is not None]
                linked = NotTwiceDifferentiable.apply(
                    len(given), *given, *[t for t in (a, h0, h, grad_h) if t is not None])
                it = iter(linked)
                grads = [None if g is None else next(it) for g in grads]
            return (*grads, None, None, None, None)

    _functions = LinearRecurrence
    return _functions


def linear_recurrence(a, b, h0=None, dim=0, *, reverse=False, log_space=False, threads=0):
    """h_t = a_t h_{t-1} + b_t along dim, h_{-1} = h0 (zeros when None).

    Diagonal: a and b of the same shape S (element-wise products); matrix: b of shape S ending
    in d and a of shape S + (d,), a_t a d x d matrix applied to b's last dimension
    (h_t[i] = sum_j a_t[i, j] h_{t-1}[j] + b_t[i]; dim must not be b's last dimension).
    h0 has shape S without dim; h has shape S. reverse: h_t = a_t h_{t+1} + b_t from the end
    (h_T = h0). log_space (diagonal, every a, b, h0 > 0): computed through logs, so that long
    products of a that underflow do not; same function. float32 or float64, all one dtype.
    The result is a new array, a torch tensor when a or b is one. With torch tensors that
    require grad (and grad enabled), gradients flow to a, b and h0 (grux's backward; not
    twice differentiable: a second backward through the gradients raises grux.Error).
    """
    if _is_torch(a) or _is_torch(b) or _is_torch(h0):
        torch = _torch()
        if torch.is_grad_enabled() and any(_is_torch(t) and t.requires_grad for t in (a, b, h0)):
            return _autograd_functions().apply(a, b, h0, int(dim), bool(reverse),
                                               bool(log_space), int(threads))
    a_np, wrap_a = _to_numpy(a, "a")
    b_np, wrap_b = _to_numpy(b, "b")
    h = _grux.affine_scan(a_np, b_np, int(dim), _optional(h0, "h0"), bool(reverse),
                          bool(log_space), int(threads))
    return wrap_b(h) if _is_torch(b) else wrap_a(h)
