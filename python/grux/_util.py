"""Conversions shared by the package's modules: arrays and CPU torch tensors in, results of
the input's type out, dtype names."""
import sys

import numpy as np

from ._grux import Error


def _torch():
    return sys.modules.get("torch")


def _to_numpy(x, name, integer=False):
    """(numpy view of x, function giving results x's type). x: a NumPy array, a CPU torch
    tensor, or anything numpy.asarray takes (lists: copied)."""
    torch = _torch()
    if torch is not None and isinstance(x, torch.Tensor):
        if not x.is_cpu:
            raise Error(f"{name}: a tensor on {x.device} was given; grux runs on the CPU "
                        "(move it with .cpu())")
        allowed = (torch.int64,) if integer else (torch.float32, torch.float64)
        if x.dtype not in allowed:
            want = "torch.int64" if integer else "torch.float32 or torch.float64"
            raise Error(f"{name}: dtype {x.dtype} is not supported (expected {want})")
        if x.layout != torch.strided:
            raise Error(f"{name}: a tensor of layout {x.layout} was given; expected a dense "
                        "(torch.strided) tensor (use .to_dense())")
        # .numpy() refuses tensors that require grad; .detach() costs a tensor, so only then.
        return (x.detach() if x.requires_grad else x).numpy(), torch.from_numpy
    if isinstance(x, np.ndarray):
        return x, _same
    try:
        a = np.asarray(x, dtype=np.int64 if integer else None)
    except (TypeError, ValueError) as e:
        raise Error(f"{name}: expected an array or a tensor, got {type(x).__name__} ({e})") from None
    if a.dtype.kind in "OUSV":  # objects, strings, bytes, raw records
        raise Error(f"{name}: expected an array or a tensor, got {type(x).__name__}")
    if not integer and a.dtype.kind in "iub":
        a = a.astype(np.float32)
    return a, _same


def _state_arrays(d, name, keys):
    """A state_dict's values as NumPy arrays (`keys` describes the expected keys for errors)."""
    if not hasattr(d, "items"):
        raise Error(f"{name}: expected a dict of arrays keyed {keys}, got {type(d).__name__}")
    return {str(k): _to_numpy(v, f"{name}['{k}']")[0] for k, v in d.items()}


def _check_same_sizes(loaded, current, attrs, what):
    """load_state_dict's check: the loaded weights' `attrs` equal the module's."""
    for a in attrs:
        got, want = getattr(loaded, a), getattr(current, a)
        if got != want:
            raise Error(f"load_state_dict: the weights have {a} = {got}, this {what} {a} = {want}")


def _same(a):
    return a


def _optional(x, name, integer=False):
    return None if x is None else _to_numpy(x, name, integer)[0]


def _dtype_name(dtype):
    torch = _torch()
    if torch is not None and isinstance(dtype, torch.dtype):
        dtype = str(dtype).replace("torch.", "")
    try:
        name = np.dtype(dtype).name
    except TypeError:
        raise Error(f"dtype: {dtype!r} is not supported (expected \"float32\" or \"float64\")") from None
    if name not in ("float32", "float64"):
        raise Error(f"dtype: {name} is not supported (expected \"float32\" or \"float64\")")
    return name
