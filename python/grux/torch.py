"""torch.nn.GRU, GRUCell, LSTM and LSTMCell whose forward and backward run on grux (and
MinGRU, grux's minGRU as a module).

grux.torch.GRU, GRUCell, LSTM and LSTMCell take exactly their nn counterparts' constructor
arguments (the GRUs also reset_before=False), register the same parameters under the same
names and shapes (load_state_dict works both ways) and initialise them the same way (the same
values after the same torch.manual_seed), and their forward takes and returns what the nn
module's does, PackedSequence and the LSTM's proj_size included. Gradients come from grux's
backward through a torch.autograd.Function. CPU tensors, float32 or float64.

Dropout between layers (training mode, num_layers > 1) draws its masks from grux's generator,
seeded from torch's: reproducible under torch.manual_seed, not the same masks as nn.GRU's.
"""
import math

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from . import Error, _grux

__all__ = ["GRU", "GRUCell"]


def _np(t, name):
    """A NumPy view of a CPU float tensor (None stays None)."""
    if t is None:
        return None
    if not isinstance(t, torch.Tensor):
        raise Error(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise Error(f"{name}: a tensor on {t.device} was given; grux runs on the CPU "
                    "(move the module and its inputs with .cpu())")
    if t.dtype not in (torch.float32, torch.float64):
        raise Error(f"{name}: dtype {t.dtype} is not supported (expected torch.float32 or "
                    "torch.float64)")
    # .numpy() refuses tensors that require grad; .detach() costs a tensor, so only then.
    return (t.detach() if t.requires_grad else t).numpy()


def _t(a):
    return None if a is None else torch.from_numpy(a)


def _reset_uniform(module):
    """nn.GRU's and nn.GRUCell's initialization: every parameter uniform in +-1/sqrt(H)."""
    stdv = 1.0 / math.sqrt(module.hidden_size)
    for w in module.parameters():
        nn.init.uniform_(w, -stdv, stdv)


def _module_dtype(device, dtype):
    """A module's dtype from nn.GRU's device= and dtype= arguments (CPU, float32 or float64)."""
    if device is not None and torch.device(device).type != "cpu":
        raise Error(f"device: {device} is not supported (grux runs on the CPU)")
    dtype = torch.get_default_dtype() if dtype is None else dtype
    if dtype not in (torch.float32, torch.float64):
        raise Error(f"dtype: {dtype} is not supported (expected torch.float32 or torch.float64)")
    return dtype


def _check_stack_args(input_size, hidden_size, num_layers, dropout):
    if not isinstance(dropout, (int, float)) or not 0 <= dropout <= 1 or isinstance(dropout, bool):
        raise Error(f"dropout: {dropout!r} is not a probability in [0, 1]")
    if int(hidden_size) < 1 or int(input_size) < 1 or int(num_layers) < 1:
        raise Error(f"sizes: input_size {input_size}, hidden_size {hidden_size} and "
                    f"num_layers {num_layers} must all be >= 1")


def _register_stack(module, gates, dtype, proj_size=0):
    """nn.GRU's (gates 3) or nn.LSTM's (gates 4) parameters, in their order and with their
    names and shapes (module._flat_weights_names lists them): for each layer and direction
    weight_ih, weight_hh, bias_ih, bias_hh, and weight_hr (proj_size, H) with a projection."""
    D, H = 2 if module.bidirectional else 1, module.hidden_size
    H_out = proj_size if proj_size > 0 else H
    module._flat_weights_names = []
    for layer in range(module.num_layers):
        for d in range(D):
            suffix = f"_l{layer}" + ("_reverse" if d else "")
            in_size = module.input_size if layer == 0 else D * H_out
            shapes = [("weight_ih", (gates * H, in_size)), ("weight_hh", (gates * H, H_out))]
            if module.bias:
                shapes += [("bias_ih", (gates * H,)), ("bias_hh", (gates * H,))]
            if proj_size > 0:
                shapes += [("weight_hr", (proj_size, H))]
            for what, shape in shapes:
                name = what + suffix
                setattr(module, name, nn.Parameter(torch.empty(shape, dtype=dtype)))
                module._flat_weights_names.append(name)


def _seed():
    return int(torch.randint(0, 2**62, (1,)).item())


def _unpack(input, batch_first):
    """(padded input, lengths as int64 NumPy or None, lengths tensor or None) of a forward's
    input: a PackedSequence is padded (in the batch's original order), a tensor kept."""
    if not isinstance(input, PackedSequence):
        return input, None, None
    x, lens = pad_packed_sequence(input, batch_first=batch_first)
    return x, lens.to(torch.int64).numpy(), lens


def _pack_like(out, input, lens, batch_first):
    """The padded output packed with the input's batch sizes and orders."""
    idx = input.sorted_indices
    dim = 0 if batch_first else 1
    if idx is not None:
        out = out.index_select(dim, idx)
        lens = lens.index_select(0, idx.cpu())
    data = pack_padded_sequence(out, lens, batch_first=batch_first, enforce_sorted=True).data
    return PackedSequence(data, input.batch_sizes, input.sorted_indices, input.unsorted_indices)


class _GruFunction(torch.autograd.Function):
    """(output, h_n) = GRU(input, h0; weights), gradients from grux's backward."""

    @staticmethod
    def forward(ctx, spec, x, h0, *weights):
        names, batch_first, dropout, reset_before, lengths, seed = spec
        core = _grux.Gru.from_state_dict(
            {n: _np(w, n) for n, w in zip(names, weights)}, batch_first, dropout, reset_before)
        out, h_n, tape = core.forward_train(_np(x, "input"), _np(h0, "hx"), lengths, seed)
        ctx.core, ctx.tape, ctx.names, ctx.has_h0 = core, tape, names, h0 is not None
        return torch.from_numpy(out), torch.from_numpy(h_n)

    @staticmethod
    def backward(ctx, grad_output, grad_h_n):
        g = ctx.core.backward(ctx.tape, _np(grad_output, "grad_output"), _np(grad_h_n, "grad_h_n"))
        return (None, _t(g["input"]), _t(g["h0"]) if ctx.has_h0 else None,
                *[_t(g[n]) for n in ctx.names])


class GRU(nn.Module):
    """torch.nn.GRU, run by grux (see the module's docstring)."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, device=None, dtype=None, reset_before=False):
        super().__init__()
        dtype = _module_dtype(device, dtype)
        _check_stack_args(input_size, hidden_size, num_layers, dropout)
        self.input_size, self.hidden_size = int(input_size), int(hidden_size)
        self.num_layers, self.bias = int(num_layers), bool(bias)
        self.batch_first, self.dropout = bool(batch_first), float(dropout)
        self.bidirectional, self.reset_before = bool(bidirectional), bool(reset_before)
        _register_stack(self, 3, dtype)
        self.reset_parameters()

    def reset_parameters(self):
        _reset_uniform(self)

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        for k, default in (("bias", True), ("batch_first", False), ("dropout", 0.0),
                           ("bidirectional", False), ("reset_before", False)):
            if getattr(self, k) != default:
                s += f", {k}={getattr(self, k)}"
        return s

    def forward(self, input, hx=None):
        x, lengths, lens = _unpack(input, self.batch_first)
        names = self._flat_weights_names
        weights = [getattr(self, n) for n in names]
        dropout = self.dropout if self.training else 0.0
        seed = _seed() if dropout > 0 and self.num_layers > 1 else 0
        if isinstance(x, torch.Tensor) and hx is not None and isinstance(hx, torch.Tensor):
            if hx.dtype != x.dtype:
                raise Error(f"hx: dtype {hx.dtype} differs from the input's {x.dtype}")
        needs_grad = torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in [x, hx, *weights])
        if needs_grad:
            spec = (names, self.batch_first, dropout, self.reset_before, lengths, seed)
            out, h_n = _GruFunction.apply(spec, x, hx, *weights)
        else:
            core = _grux.Gru.from_state_dict({n: _np(w, n) for n, w in zip(names, weights)},
                                             self.batch_first, dropout, self.reset_before)
            if dropout > 0 and self.num_layers > 1:
                o, h, _ = core.forward_train(_np(x, "input"), _np(hx, "hx"), lengths, seed)
            else:
                o, h = core.forward(_np(x, "input"), _np(hx, "hx"), lengths)
            out, h_n = torch.from_numpy(o), torch.from_numpy(h)
        if lens is not None:
            out = _pack_like(out, input, lens, self.batch_first)
        return out, h_n


def _packed_cell(module, weights, make):
    """(cell, stamp, fresh): the module's packed cell (module._packed) for these weights, made
    anew by make() when they changed (fresh: True then).

    Packed once and kept while every weight is the same tensor, with the same storage, at the
    same version: optimizers, load_state_dict and in-place writes under torch.no_grad() bump
    the version, so the next call repacks. Writes through .data do not (PyTorch gives .data its
    own version counter): after those, call reset_packed_weights(). The cache holds the weights
    themselves, so no address in it can be reused meanwhile; a new shape, strides or dtype
    comes with a new storage or a version bump. With grux._torch_access the check is one call
    into libtorch (_weights_stamp: the same three things as bytes), else it reads each
    weight's attributes."""
    packed = module._packed
    stamp = _grux._weights_stamp(weights)
    if packed is not None:
        kept, ptrs, versions, kept_stamp, cell = packed
        if stamp is not None and kept_stamp is not None:
            if stamp == kept_stamp:
                return cell, stamp, False
        elif len(kept) == len(weights) and all(a is b for a, b in zip(kept, weights)) and \
                [w._version for w in weights] == versions and \
                [w.data_ptr() for w in weights] == ptrs:
            return cell, stamp, False
    cell = make()
    module._packed = (list(weights), [w.data_ptr() for w in weights],
                      [w._version for w in weights], stamp, cell)
    return cell, stamp, True


class _PackedCell:
    """What GRUCell and LSTMCell share about their packed copy of the weights (_packed_cell):
    the attributes that hold it (_PACKED), left out of copies and pickles and forgotten by
    reset_packed_weights."""

    _PACKED = ("_packed",)

    def __getstate__(self):  # copy.deepcopy, pickle: the packed copy is not carried
        state = self.__dict__.copy()
        for name in self._PACKED:
            state[name] = None
        return state

    def reset_packed_weights(self):
        """Forget the packed copy of the weights: needed only after writing them through
        .data (which PyTorch does not count as a change); any other change is seen."""
        for name in self._PACKED:
            setattr(self, name, None)


class _CellFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, cell, x, hx, *weights):
        h = cell.forward(_np(x, "input"), _np(hx, "hx"))
        ctx.cell, ctx.has_hx = cell, hx is not None
        ctx.save_for_backward(x, hx if hx is not None else torch.zeros(0))
        return torch.from_numpy(h)

    @staticmethod
    def backward(ctx, grad):
        x, hx = ctx.saved_tensors
        g = ctx.cell.backward(_np(x, "input"), _np(hx, "hx") if ctx.has_hx else None,
                              _np(grad, "grad_output"))
        names = ["weight_ih", "weight_hh"] + (["bias_ih", "bias_hh"] if "bias_ih" in g else [])
        return (None, _t(g["input"]), _t(g["hx"]) if ctx.has_hx else None,
                *[_t(g[n]) for n in names])


class GRUCell(_PackedCell, nn.Module):
    """torch.nn.GRUCell, run by grux."""

    _PACKED = ("_packed", "_fast")

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None,
                 reset_before=False):
        super().__init__()
        dtype = _module_dtype(device, dtype)
        if int(hidden_size) < 1 or int(input_size) < 1:
            raise Error(f"sizes: input_size {input_size} and hidden_size {hidden_size} must be >= 1")
        self.input_size, self.hidden_size = int(input_size), int(hidden_size)
        self.bias, self.reset_before = bool(bias), bool(reset_before)
        H = self.hidden_size
        self.weight_ih = nn.Parameter(torch.empty(3 * H, self.input_size, dtype=dtype))
        self.weight_hh = nn.Parameter(torch.empty(3 * H, H, dtype=dtype))
        if self.bias:
            self.bias_ih = nn.Parameter(torch.empty(3 * H, dtype=dtype))
            self.bias_hh = nn.Parameter(torch.empty(3 * H, dtype=dtype))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self._packed = None  # (key, grux cell): see _cell
        self._fast = None  # _grux._cell_forward's handle for that cell, or None
        self.reset_parameters()

    def reset_parameters(self):
        _reset_uniform(self)

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if not self.bias:
            s += ", bias=False"
        if self.reset_before:
            s += ", reset_before=True"
        return s

    def _weights(self):
        p = self._parameters  # not getattr: nn.Module's __getattr__ costs a microsecond each
        names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh") if self.bias else \
            ("weight_ih", "weight_hh")
        return [p[n] for n in names]

    def _cell(self, weights):
        names = ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]
        cell, stamp, fresh = _packed_cell(self, weights, lambda: _grux.GruCell.from_state_dict(
            {n: _np(w, n) for n, w in zip(names, weights)}, self.reset_before))
        if fresh:
            self._fast = _grux._cell_handle(cell, names[:len(weights)], weights) \
                if stamp is not None else None
        return cell

    def forward(self, input, hx=None):
        # Without autograd, one sequence in f32 on torch tensors: one call into C++, which
        # checks the weights' stamps itself (None: anything else, or weights changed).
        fast = self.__dict__.get("_fast")
        if fast is not None and not torch.is_grad_enabled():
            out = _grux._cell_forward(fast, self._parameters, input, hx)
            if out is not None:
                return out
        weights = self._weights()
        cell = self._cell(weights)
        if torch.is_grad_enabled() and any(
                t is not None and t.requires_grad for t in [input, hx, *weights]):
            return _CellFunction.apply(cell, input, hx, *weights)
        # Tensors go to C++ as they are (read through data_ptr; the result is a tensor);
        # anything else (subclasses, wrong types: _np words the errors) through NumPy.
        if input.__class__ is torch.Tensor and (hx is None or hx.__class__ is torch.Tensor):
            return cell.forward(input, hx)
        return torch.from_numpy(cell.forward(_np(input, "input"), _np(hx, "hx")))


def _install_cell_call(cls):
    # nn.Module.__call__ and forward's inference fast path as one C call (cell_call in
    # python/src/module.cpp), where they would do nothing else: no hooks, no tracing, autograd
    # off, the class exactly cls (GRUCell, LSTMCell). Everything else calls nn.Module.__call__
    # as usual. Left out under a torch whose nn.Module keeps its global hooks elsewhere.
    import torch.nn.modules.module as mm
    names = ("_global_backward_hooks", "_global_forward_pre_hooks", "_global_forward_hooks")
    tables = tuple(getattr(mm, n, None) for n in names)
    if all(isinstance(t, dict) for t in tables) and nn.Module.__call__ is mm.Module._call_impl:
        cls.__call__ = _grux._cell_call(cls, nn.Module, tables)


_install_cell_call(GRUCell)


# ---- LSTM ------------------------------------------------------------------------------

__all__ += ["LSTM", "LSTMCell"]


class _LstmFunction(torch.autograd.Function):
    """(output, h_n, c_n) = LSTM(input, h0, c0; weights), gradients from grux's backward."""

    @staticmethod
    def forward(ctx, spec, x, h0, c0, *weights):
        names, batch_first, dropout, lengths, seed = spec
        core = _grux.Lstm.from_state_dict(
            {n: _np(w, n) for n, w in zip(names, weights)}, batch_first, dropout)
        out, h_n, c_n, tape = core.forward_train(_np(x, "input"), _np(h0, "h0"), _np(c0, "c0"),
                                                 lengths, seed)
        ctx.core, ctx.tape, ctx.names = core, tape, names
        ctx.has_h0, ctx.has_c0 = h0 is not None, c0 is not None
        # The tape reads x and the weights where they lie: saving them lets torch refuse a
        # backward after they were modified in place.
        ctx.save_for_backward(x, *weights)
        return torch.from_numpy(out), torch.from_numpy(h_n), torch.from_numpy(c_n)

    @staticmethod
    @torch.autograd.function.once_differentiable  # grux has no second derivatives
    def backward(ctx, grad_output, grad_h_n, grad_c_n):
        ctx.saved_tensors  # noqa: B018 (raises if a saved tensor was modified in place)
        g = ctx.core.backward(ctx.tape, _np(grad_output, "grad_output"), _np(grad_h_n, "grad_h_n"),
                              _np(grad_c_n, "grad_c_n"))
        return (None, _t(g["input"]), _t(g["h0"]) if ctx.has_h0 else None,
                _t(g["c0"]) if ctx.has_c0 else None, *[_t(g[n]) for n in ctx.names])


def _split_hx(hx, x):
    """(h0, c0) of nn.LSTM's hx: None or a pair of tensors (grux also takes None for either:
    zeros), each of the input's dtype."""
    if hx is None:
        return None, None
    if not isinstance(hx, (tuple, list)) or len(hx) != 2:
        raise Error(f"hx: expected None or a pair (h_0, c_0) of tensors, got {type(hx).__name__}")
    for name, t in zip(("h_0", "c_0"), hx):
        if isinstance(t, torch.Tensor) and isinstance(x, torch.Tensor) and t.dtype != x.dtype:
            raise Error(f"hx: {name}'s dtype {t.dtype} differs from the input's {x.dtype}")
    return hx[0], hx[1]


class LSTM(nn.Module):
    """torch.nn.LSTM, run by grux: nn.LSTM's constructor arguments (proj_size included),
    parameters, initialization and forward (input or PackedSequence, hx = (h_0, c_0)) ->
    (output, (h_n, c_n)); gradients of the input, h_0, c_0 and every parameter from grux's
    backward. Dropout masks come from grux's generator, seeded from torch's."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__()
        dtype = _module_dtype(device, dtype)
        _check_stack_args(input_size, hidden_size, num_layers, dropout)
        if not isinstance(proj_size, int) or isinstance(proj_size, bool) or \
                not 0 <= proj_size < int(hidden_size):
            raise Error(f"proj_size: {proj_size!r} must be an integer in [0, hidden_size "
                        f"{hidden_size})")
        self.input_size, self.hidden_size = int(input_size), int(hidden_size)
        self.num_layers, self.bias = int(num_layers), bool(bias)
        self.batch_first, self.dropout = bool(batch_first), float(dropout)
        self.bidirectional, self.proj_size = bool(bidirectional), int(proj_size)
        _register_stack(self, 4, dtype, self.proj_size)
        self.reset_parameters()

    def reset_parameters(self):
        _reset_uniform(self)

    def extra_repr(self):  # in nn.LSTM's order
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        for k, default in (("bias", True), ("batch_first", False), ("dropout", 0.0),
                           ("bidirectional", False)):
            if getattr(self, k) != default:
                s += f", {k}={getattr(self, k)}"
        return s

    def forward(self, input, hx=None):
        x, lengths, lens = _unpack(input, self.batch_first)
        h0, c0 = _split_hx(hx, x)
        names = self._flat_weights_names
        weights = [getattr(self, n) for n in names]
        dropout = self.dropout if self.training else 0.0
        seed = _seed() if dropout > 0 and self.num_layers > 1 else 0
        if torch.is_grad_enabled() and any(
                t is not None and t.requires_grad for t in [x, h0, c0, *weights]):
            spec = (names, self.batch_first, dropout, lengths, seed)
            out, h_n, c_n = _LstmFunction.apply(spec, x, h0, c0, *weights)
        else:
            core = _grux.Lstm.from_state_dict({n: _np(w, n) for n, w in zip(names, weights)},
                                              self.batch_first, dropout)
            args = (_np(x, "input"), _np(h0, "h_0"), _np(c0, "c_0"), lengths)
            if dropout > 0 and self.num_layers > 1:
                o, h, c, _ = core.forward_train(*args, seed)
            else:
                o, h, c = core.forward(*args)
            out, h_n, c_n = torch.from_numpy(o), torch.from_numpy(h), torch.from_numpy(c)
        if lens is not None:
            out = _pack_like(out, input, lens, self.batch_first)
        return out, (h_n, c_n)


class _LstmCellFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, cell, x, h, c, *weights):
        h1, c1 = cell.forward(_np(x, "input"), _np(h, "h_0"), _np(c, "c_0"))
        ctx.cell, ctx.has_h, ctx.has_c = cell, h is not None, c is not None
        empty = torch.zeros(0)
        ctx.save_for_backward(x, h if h is not None else empty, c if c is not None else empty)
        return torch.from_numpy(h1), torch.from_numpy(c1)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_h, grad_c):
        x, h, c = ctx.saved_tensors
        g = ctx.cell.backward(_np(x, "input"), _np(h, "h_0") if ctx.has_h else None,
                              _np(c, "c_0") if ctx.has_c else None, _np(grad_h, "grad_h"),
                              _np(grad_c, "grad_c"))
        names = ["weight_ih", "weight_hh"] + (["bias_ih", "bias_hh"] if "bias_ih" in g else [])
        return (None, _t(g["input"]), _t(g["hx"]) if ctx.has_h else None,
                _t(g["cx"]) if ctx.has_c else None, *[_t(g[n]) for n in names])


class LSTMCell(_PackedCell, nn.Module):
    """torch.nn.LSTMCell, run by grux: forward(input, hx=None) -> (h_1, c_1), hx = (h_0, c_0).
    The weights are packed once and kept while they do not change (as GRUCell's)."""

    _PACKED = ("_packed", "_fast")

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__()
        dtype = _module_dtype(device, dtype)
        if int(hidden_size) < 1 or int(input_size) < 1:
            raise Error(f"sizes: input_size {input_size} and hidden_size {hidden_size} must be >= 1")
        self.input_size, self.hidden_size, self.bias = int(input_size), int(hidden_size), bool(bias)
        H = self.hidden_size
        self.weight_ih = nn.Parameter(torch.empty(4 * H, self.input_size, dtype=dtype))
        self.weight_hh = nn.Parameter(torch.empty(4 * H, H, dtype=dtype))
        if self.bias:
            self.bias_ih = nn.Parameter(torch.empty(4 * H, dtype=dtype))
            self.bias_hh = nn.Parameter(torch.empty(4 * H, dtype=dtype))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self._packed = None  # see _packed_cell
        self._fast = None  # _grux._cell_forward's handle for that cell, or None
        self.reset_parameters()

    def reset_parameters(self):
        _reset_uniform(self)

    def extra_repr(self):
        return f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")

    def forward(self, input, hx=None):
        # Without autograd, one sequence in f32 on torch tensors (hx None or a tuple): one call
        # into C++, which checks the weights' stamps itself (None: anything else, or weights
        # changed), as GRUCell's.
        fast = self.__dict__.get("_fast")
        if fast is not None and not torch.is_grad_enabled():
            out = _grux._cell_forward(fast, self._parameters, input, hx)
            if out is not None:
                return out
        h, c = _split_hx(hx, input)
        p = self._parameters
        names = ["weight_ih", "weight_hh"] + (["bias_ih", "bias_hh"] if self.bias else [])
        weights = [p[n] for n in names]
        cell, stamp, fresh = _packed_cell(self, weights, lambda: _grux.LstmCell.from_state_dict(
            {n: _np(w, n) for n, w in zip(names, weights)}))
        if fresh:
            self._fast = _grux._cell_handle(cell, names, weights) if stamp is not None else None
        if torch.is_grad_enabled() and any(
                t is not None and t.requires_grad for t in [input, h, c, *weights]):
            return _LstmCellFunction.apply(cell, input, h, c, *weights)
        h1, c1 = cell.forward(_np(input, "input"), _np(h, "h_0"), _np(c, "c_0"))
        return torch.from_numpy(h1), torch.from_numpy(c1)


_install_cell_call(LSTMCell)


# ---- minGRU ----------------------------------------------------------------------------

from ._util import _to_numpy  # noqa: E402

__all__ += ["MinGRU"]


class _MinGruFunction(torch.autograd.Function):
    """(output, h_n) = minGRU(input, h0; weights), gradients from grux's backward."""

    @staticmethod
    def forward(ctx, spec, x, h0, *weights):
        names, batch_first, log_space, lengths = spec
        core = _grux.MinGru.from_state_dict(
            {n: _np(w, n) for n, w in zip(names, weights)}, batch_first, log_space)
        out, h_n, tape = core.forward_train(_np(x, "input"), _np(h0, "h0"), lengths)
        ctx.core, ctx.tape, ctx.names, ctx.has_h0 = core, tape, names, h0 is not None
        # The tape reads x and the weights where they lie: saving them lets torch refuse a
        # backward after they were modified in place.
        ctx.save_for_backward(x, *weights)
        return torch.from_numpy(out), torch.from_numpy(h_n)

    @staticmethod
    @torch.autograd.function.once_differentiable  # grux has no second derivatives
    def backward(ctx, grad_output, grad_h_n):
        ctx.saved_tensors  # noqa: B018 (raises if a saved tensor was modified in place)
        g = ctx.core.backward(ctx.tape, _np(grad_output, "grad_output"), _np(grad_h_n, "grad_h_n"))
        return (None, _t(g["input"]), _t(g["h0"]) if ctx.has_h0 else None,
                *[_t(g[n]) for n in ctx.names])


class MinGRU(nn.Module):
    """A stack of minGRU layers (grux.MinGRU's equations) as a torch.nn.Module run by grux.

    Parameters weight_l{k} (2 * hidden_size, in_k) and bias_l{k} (2 * hidden_size), in_k =
    input_size for k = 0 and hidden_size above: the keys of grux.MinGRU's state_dict.
    Initialised like nn.Linear's default (uniform in +-1/sqrt(in_k), weights and biases),
    from torch's generator (reproducible under torch.manual_seed). CPU, float32 or float64.
    forward(input, h0=None, lengths=None) -> (output, h_n) with grux.MinGRU's shapes;
    gradients (input, h0, parameters) from grux's backward through a torch.autograd.Function.
    """

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 log_space=False, device=None, dtype=None):
        super().__init__()
        dtype = _module_dtype(device, dtype)
        if int(hidden_size) < 1 or int(input_size) < 1 or int(num_layers) < 1:
            raise Error(f"sizes: input_size {input_size}, hidden_size {hidden_size} and "
                        f"num_layers {num_layers} must all be >= 1")
        self.input_size, self.hidden_size = int(input_size), int(hidden_size)
        self.num_layers, self.bias = int(num_layers), bool(bias)
        self.batch_first, self.log_space = bool(batch_first), bool(log_space)
        H = self.hidden_size
        self._flat_weights_names = []
        for layer in range(self.num_layers):
            in_size = self.input_size if layer == 0 else H
            setattr(self, f"weight_l{layer}",
                    nn.Parameter(torch.empty(2 * H, in_size, dtype=dtype)))
            self._flat_weights_names.append(f"weight_l{layer}")
            if self.bias:
                setattr(self, f"bias_l{layer}", nn.Parameter(torch.empty(2 * H, dtype=dtype)))
                self._flat_weights_names.append(f"bias_l{layer}")
        self.reset_parameters()

    def reset_parameters(self):
        for layer in range(self.num_layers):
            bound = 1.0 / math.sqrt(self.input_size if layer == 0 else self.hidden_size)
            nn.init.uniform_(getattr(self, f"weight_l{layer}"), -bound, bound)
            if self.bias:
                nn.init.uniform_(getattr(self, f"bias_l{layer}"), -bound, bound)

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        for k, default in (("bias", True), ("batch_first", False), ("log_space", False)):
            if getattr(self, k) != default:
                s += f", {k}={getattr(self, k)}"
        return s

    def forward(self, input, h0=None, lengths=None):
        """(output, h_n): input (T, N, I) ((N, T, I) with batch_first, (T, I) unbatched), h0
        (num_layers, N, H) / (num_layers, H) or None, lengths (N,) integers in [1, T] or None
        (outputs past a sequence's length are zero, h_n is its state at its last step)."""
        names = self._flat_weights_names
        weights = [getattr(self, n) for n in names]
        if isinstance(input, torch.Tensor) and isinstance(h0, torch.Tensor) and h0.dtype != input.dtype:
            raise Error(f"h0: dtype {h0.dtype} differs from the input's {input.dtype}")
        if lengths is not None:
            if isinstance(lengths, torch.Tensor) and not lengths.is_floating_point():
                lengths = lengths.detach().to(torch.int64)
            lengths = _to_numpy(lengths, "lengths", integer=True)[0]
        if torch.is_grad_enabled() and any(
                t is not None and t.requires_grad for t in [input, h0, *weights]):
            spec = (names, self.batch_first, self.log_space, lengths)
            return _MinGruFunction.apply(spec, input, h0, *weights)
        core = _grux.MinGru.from_state_dict({n: _np(w, n) for n, w in zip(names, weights)},
                                            self.batch_first, self.log_space)
        out, h_n = core.forward(_np(input, "input"), _np(h0, "h0"), lengths)
        return torch.from_numpy(out), torch.from_numpy(h_n)


class _Scale(nn.Module):
    """Inference batch norm as a model file holds it: (x - mean) * scale + shift."""

    def __init__(self, mean, scale, shift):
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("scale", scale)
        self.register_buffer("shift", shift)

    def forward(self, x):
        return (x - self.mean) * self.scale + self.shift


class FileModel(nn.Module):
    """A model file (grux.load: RTNeural JSON, GuitarML JSON, .nam, safetensors) as a
    torch.nn.Module made of grux.torch.GRU / LSTM and torch.nn layers, its weights parameters
    (trainable; load_state_dict works), its stored initial states buffers. forward(x): x
    (T, input_size) or (T, N, input_size), from the initial state, returns (T, output_size)
    or (T, N, output_size): the numbers of grux.load(path).process(x) within f32 rounding."""

    def __init__(self, model):
        super().__init__()
        self.input_size, self.output_size, self.skip = (model.input_size, model.output_size,
                                                        model.skip)
        self.sample_rate = model.sample_rate
        self.layers = nn.ModuleList()
        acts = {"tanh": nn.Tanh, "relu": nn.ReLU, "sigmoid": nn.Sigmoid, "elu": nn.ELU,
                "softmax": lambda: nn.Softmax(dim=-1)}
        for k, layer in enumerate(model.layers):
            kind, t = layer["kind"], {n: torch.from_numpy(a.copy()) for n, a in
                                      layer["tensors"].items()}
            I, O = layer["in_size"], layer["out_size"]
            if kind in ("gru", "lstm"):
                bias = "b_ih" in t
                m = GRU(I, O, bias=bias, reset_before=layer.get("form") == "reset_before") \
                    if kind == "gru" else LSTM(I, O, bias=bias)
                with torch.no_grad():
                    m.weight_ih_l0.copy_(t["w_ih"])
                    m.weight_hh_l0.copy_(t["w_hh"])
                    if bias:
                        m.bias_ih_l0.copy_(t["b_ih"])
                        m.bias_hh_l0.copy_(t["b_hh"])
                m.register_buffer("h0", t.get("h0", torch.zeros(O)))
                if kind == "lstm":
                    m.register_buffer("c0", t.get("c0", torch.zeros(O)))
            elif kind == "dense":
                m = nn.Linear(I, O, bias="bias" in t)
                with torch.no_grad():
                    m.weight.copy_(t["weight"])
                    if "bias" in t:
                        m.bias.copy_(t["bias"])
            elif kind == "activation":
                m = acts[layer["activation"]]()
            elif kind == "prelu":
                m = nn.PReLU(O)
                with torch.no_grad():
                    m.weight.copy_(t["weight"])
            else:
                m = _Scale(t["mean"], t["weight"], t["bias"])
            m.grux_kind = kind
            self.layers.append(m)

    def forward(self, x):
        if x.dim() not in (2, 3) or x.shape[-1] != self.input_size:
            raise Error(f"x: shape {tuple(x.shape)}, expected (T, {self.input_size}) or "
                        f"(T, N, {self.input_size})")
        batched = x.dim() == 3
        y = x if batched else x.unsqueeze(1)
        N = y.shape[1]
        for m in self.layers:
            if m.grux_kind in ("gru", "lstm"):
                h0 = m.h0.to(y.dtype).expand(1, N, -1).contiguous()
                hx = h0 if m.grux_kind == "gru" else (h0, m.c0.to(y.dtype).expand(1, N, -1)
                                                      .contiguous())
                y = m(y, hx)[0]
            else:
                y = m(y)
        if self.skip:
            y = y + (x if batched else x.unsqueeze(1))[..., :self.skip]
        return y if batched else y.squeeze(1)


def from_file(path):
    """grux.torch.FileModel of the model file at `path` (see grux.load)."""
    from ._model import load
    return FileModel(load(path))


__all__ += ["FileModel", "from_file"]
