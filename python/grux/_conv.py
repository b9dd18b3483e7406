"""Convolution and rearrange: conv1d, conv2d (torch.nn.functional's semantics, by grux's three
algorithms) and rearrange (einops' grammar). See include/grux/conv.h and rearrange.h.

Arrays and CPU torch tensors in, results of the input's type out. A torch tensor that requires
grad (input, weight or bias) gives a result whose gradients come from grux's conv backward;
rearrange is differentiable too.
"""
import numbers

import numpy as np

from . import _grux
from ._grux import Error
from ._util import _optional, _to_numpy, _torch

__all__ = ["conv1d", "conv2d", "rearrange"]

_ALGOS = ("loops", "im2col", "toeplitz")


def _int(v, name):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise Error(f"{name}: expected an integer, got {v!r}")
    return int(v)


def _scalar(v, name):
    """conv1d's stride/padding/dilation: an int or a 1-tuple (as torch accepts)."""
    if isinstance(v, (tuple, list)):
        if len(v) != 1:
            raise Error(f"{name}: expected an integer or a 1-tuple for conv1d, got {v!r}")
        v = v[0]
    if isinstance(v, str):
        raise Error(f"{name}: {v!r} is not supported (grux takes integer {name}; string "
                    "padding such as 'same' or 'valid' is not implemented)")
    return _int(v, name)


def _pair(v, name):
    """conv2d's stride/padding/dilation: an int (both dims) or a (h, w) pair."""
    if isinstance(v, str):
        raise Error(f"{name}: {v!r} is not supported (grux takes integer {name}; string "
                    "padding such as 'same' or 'valid' is not implemented)")
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise Error(f"{name}: expected an integer or an (h, w) pair, got {v!r}")
        return (_int(v[0], name), _int(v[1], name))
    v = _int(v, name)
    return (v, v)


def _options(algo, groups, threads):
    if algo not in _ALGOS:
        raise Error(f"algo: {algo!r} is unknown (expected one of {', '.join(_ALGOS)})")
    return _int(groups, "groups"), algo, _int(threads, "threads")


def _needs_grad(*ts):
    torch = _torch()
    return (torch is not None and torch.is_grad_enabled()
            and any(isinstance(t, torch.Tensor) and t.requires_grad for t in ts))


def _make_function(forward_name, backward_name):
    """A torch.autograd.Function over grux's conv forward / backward (made on first use, so
    that importing grux does not import torch)."""
    torch = _torch()

    class ConvFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, opts, x, w, b):
            y = getattr(_grux, forward_name)(
                _to_numpy(x, "input")[0], _to_numpy(w, "weight")[0], _optional(b, "bias"), *opts)
            ctx.opts, ctx.has_bias = opts, b is not None
            ctx.save_for_backward(x, w)
            return torch.from_numpy(y)

        @staticmethod
        @torch.autograd.function.once_differentiable  # grux has no second derivatives
        def backward(ctx, dy):
            x, w = ctx.saved_tensors
            g = getattr(_grux, backward_name)(x.detach().numpy(), w.detach().numpy(),
                                              dy.detach().numpy(), ctx.has_bias, *ctx.opts)
            db = torch.from_numpy(g["bias"]) if ctx.has_bias else None
            return None, torch.from_numpy(g["input"]), torch.from_numpy(g["weight"]), db

    return ConvFunction


_functions = {}


def _run(dims, input, weight, bias, opts):
    fwd, bwd = f"conv{dims}d_forward", f"conv{dims}d_backward"
    if _needs_grad(input, weight, bias):
        torch = _torch()
        for t, name in ((input, "input"), (weight, "weight"), (bias, "bias")):
            if t is not None and not isinstance(t, torch.Tensor):
                raise Error(f"{name}: expected a torch.Tensor (the other arguments are tensors "
                            f"that require grad), got {type(t).__name__}")
        if dims not in _functions:
            _functions[dims] = _make_function(fwd, bwd)
        return _functions[dims].apply(opts, input, weight, bias)
    x, wrap = _to_numpy(input, "input")
    w = _to_numpy(weight, "weight")[0]
    return wrap(getattr(_grux, fwd)(x, w, _optional(bias, "bias"), *opts))


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, algo="im2col",
           threads=0):
    """torch.nn.functional.conv1d by grux: input (N, C, L) or (C, L) unbatched, weight
    (D, C/groups, K), bias (D) or None, all float32 or all float64; returns (N, D, OL) or
    (D, OL), a new array of the input's type, OL = (L + 2*padding - dilation*(K-1) - 1) //
    stride + 1. stride, padding, dilation: integers (string padding is not supported).
    algo: "loops" (direct, slow), "im2col" (GEMM, the default) or "toeplitz" (small problems:
    refused over 256 MiB of matrix). threads: 0 lets grux choose. Torch tensors that require
    grad give a differentiable result (grux's conv1d backward). Errors: grux.Error."""
    opts = (_scalar(stride, "stride"), _scalar(padding, "padding"),
            _scalar(dilation, "dilation"), *_options(algo, groups, threads))
    return _run(1, input, weight, bias, opts)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, algo="im2col",
           threads=0):
    """torch.nn.functional.conv2d by grux: input (N, C, H, W) or (C, H, W) unbatched, weight
    (D, C/groups, KH, KW), bias (D) or None, all float32 or all float64; returns
    (N, D, OH, OW) or (D, OH, OW), a new array of the input's type. stride, padding,
    dilation: an integer or an (h, w) pair (string padding is not supported). algo, threads
    and gradients as in conv1d."""
    opts = (_pair(stride, "stride"), _pair(padding, "padding"), _pair(dilation, "dilation"),
            *_options(algo, groups, threads))
    return _run(2, input, weight, bias, opts)


def _rearrange_function():
    """A torch.autograd.Function for rearrange. Rearranging moves each element to exactly one
    place, so the gradient is scattered back through the same rearrangement of the element
    indices (an index array rearranged alongside)."""
    torch = _torch()

    class RearrangeFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, pattern, sizes, x):
            y = _grux.rearrange(x.detach().numpy(), pattern, sizes)
            index = np.arange(x.numel(), dtype=np.float64).reshape(tuple(x.shape))
            where = _grux.rearrange(index, pattern, sizes)
            ctx.where = torch.from_numpy(where.astype(np.int64).reshape(-1))
            ctx.in_shape = x.shape
            return torch.from_numpy(y).clone()  # autograd outputs may not alias the input

        @staticmethod
        def backward(ctx, dy):
            dx = dy.new_empty(ctx.where.numel())
            dx[ctx.where] = dy.reshape(-1)
            return None, None, dx.reshape(ctx.in_shape)

    return RearrangeFunction


def rearrange(tensor, pattern, **axes_lengths):
    """einops-style rearrange: rearrange(x, "b (h w) c -> b c h w", h=4). Grammar: each side
    lists axes names, "(...)" groups (split on the left, merged on the right), "1" or "()"
    for size-1 dimensions and at most one "..."; sizes of split axes are given as keywords
    (one per group may be left out and is inferred). float32 or float64.
    The result has the input's type and shares the input's memory when grux can express it
    with strides (always for permutations, splits and inserted size-1 axes), else it is a new
    contiguous array. A read-only NumPy input gives a read-only result. A torch tensor that
    requires grad (grad enabled) gives a differentiable result, which is then always a copy.
    Errors (bad pattern, shape mismatch): grux.Error naming the pattern and the problem."""
    x, wrap = _to_numpy(tensor, "tensor")
    if not isinstance(pattern, str):
        raise Error(f"pattern: expected a string such as \"b c h w -> b (h w) c\", got "
                    f"{type(pattern).__name__}")
    sizes = {k: _int(v, k) for k, v in axes_lengths.items()}
    if _needs_grad(tensor):
        if "rearrange" not in _functions:
            _functions["rearrange"] = _rearrange_function()
        return _functions["rearrange"].apply(pattern, sizes, tensor)
    y = _grux.rearrange(x, pattern, sizes)
    if not x.flags.writeable:
        y.flags.writeable = False
    return wrap(y)
