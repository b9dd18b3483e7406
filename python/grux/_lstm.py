"""The LSTM: grux.LSTM, grux.LSTMCell and grux.LSTMStream on NumPy arrays (or CPU torch
tensors), without autograd (grux.torch.LSTM and LSTMCell are the torch.nn.Module versions).

nn.LSTM's equations, gates i, f, g, o in PyTorch's order, b_ih + b_hh:
    c' = f * c + i * g,   h' = o * tanh(c'),   h' = W_hr (o * tanh(c')) with proj_size > 0
The state is h (H_out = proj_size or hidden_size wide) and c (hidden_size wide). See
include/grux/lstm.h and docs/lstm.md.
"""
from . import Tape, _grux, _Stream
from ._grux import Error
from ._util import _check_same_sizes, _dtype_name, _optional, _state_arrays, _to_numpy

__all__ = ["LSTM", "LSTMCell", "LSTMStream"]

_SIZES = ("input_size", "hidden_size", "num_layers", "bias", "bidirectional", "proj_size")


class LSTM:
    """torch.nn.LSTM on NumPy arrays (or CPU torch tensors), without autograd.

    Weights are drawn like PyTorch's (uniform in +-1/sqrt(hidden_size), from `seed`) until
    load_state_dict replaces them. proj_size > 0 adds nn.LSTM's projection (weight_hr_l{k}).
    dtype: "float32" or "float64" (numpy and torch dtypes accepted).
    """

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, proj_size=0, dtype="float32", seed=0):
        self.batch_first = bool(batch_first)
        self.dropout = float(dropout)
        self._core = _grux.Lstm(int(input_size), int(hidden_size), int(num_layers), bool(bias),
                                self.batch_first, self.dropout, bool(bidirectional),
                                int(proj_size), _dtype_name(dtype), int(seed))

    input_size = property(lambda self: self._core.input_size)
    hidden_size = property(lambda self: self._core.hidden_size)
    num_layers = property(lambda self: self._core.num_layers)
    bias = property(lambda self: self._core.bias)
    bidirectional = property(lambda self: self._core.bidirectional)
    proj_size = property(lambda self: self._core.proj_size)
    dtype = property(lambda self: self._core.dtype)

    def __repr__(self):
        return (f"grux.LSTM({self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, "
                f"bias={self.bias}, batch_first={self.batch_first}, dropout={self.dropout}, "
                f"bidirectional={self.bidirectional}, proj_size={self.proj_size}, "
                f"dtype=\"{self.dtype}\")")

    def load_state_dict(self, state_dict):
        """Weights from nn.LSTM's state_dict keys (NumPy arrays or torch tensors, all float32 or
        all float64: the LSTM takes their dtype). Sizes, bias and proj_size must match this
        LSTM's; every key must be present and no other. The arrays are copied only when not
        contiguous."""
        arrays = _state_arrays(state_dict, "state_dict", "like nn.LSTM's state_dict")
        core = _grux.Lstm.from_state_dict(arrays, self.batch_first, self.dropout)
        _check_same_sizes(core, self._core, _SIZES, "LSTM")
        self._core = core

    def state_dict(self):
        """The weights as NumPy arrays keyed like nn.LSTM's (views of this LSTM's weights)."""
        return self._core.state_dict()

    def __call__(self, input, hx=None, lengths=None, threads=0, precision="f32"):
        """(output, (h_n, c_n)), as nn.LSTM: input (T, N, I), (N, T, I) with batch_first, or
        (T, I) unbatched; hx None or (h0, c0), h0 (layers * directions, N, H_out) and c0
        (layers * directions, N, H), either None for zeros; lengths (N,) integers in [1, T]
        (any order): output rows past a sequence's length are zero and h_n, c_n hold its state
        at its last step. threads: 0 lets grux choose. precision: "f32", or "bf16" / "int8"
        (a float32 LSTM: the products with the weights in that precision, the weights
        converted for the call; docs/precision.md)."""
        x, wrap = _to_numpy(input, "input")
        h0, c0 = _split_hx(hx)
        out, h_n, c_n = self._core.forward(x, _optional(h0, "h0"), _optional(c0, "c0"),
                                           _optional(lengths, "lengths", True), int(threads),
                                           str(precision))
        return wrap(out), (wrap(h_n), wrap(c_n))

    forward = __call__

    def forward_train(self, input, hx=None, lengths=None, dropout_seed=0, threads=0,
                      precision="f32"):
        """(output, (h_n, c_n), tape): as __call__, with dropout between layers (mask drawn
        from dropout_seed), saving in tape what backward needs. precision "bf16" (a float32
        LSTM) trains with the products in bf16; backward then runs in bf16 too."""
        x, wrap = _to_numpy(input, "input")
        h0, c0 = _split_hx(hx)
        out, h_n, c_n, tape = self._core.forward_train(
            x, _optional(h0, "h0"), _optional(c0, "c0"), _optional(lengths, "lengths", True),
            int(dropout_seed), int(threads), str(precision))
        return wrap(out), (wrap(h_n), wrap(c_n)), Tape(self._core, tape, wrap)

    def backward(self, tape, grad_output=None, grad_h_n=None, grad_c_n=None, threads=0):
        """Gradients from d(loss)/d(output), d(loss)/d(h_n) and/or d(loss)/d(c_n) (shapes as
        forward_train returned; at least one): a dict with "input", "h0", "c0" and every
        weight's key."""
        if not isinstance(tape, Tape) or not isinstance(tape._core, _grux.Lstm):
            raise Error(f"tape: expected the Tape LSTM.forward_train returned, got "
                        f"{type(tape).__name__}")
        if grad_output is None and grad_h_n is None and grad_c_n is None:
            raise Error("backward: give grad_output, grad_h_n or grad_c_n (all are None)")
        grads = tape._core.backward(tape._tape, _optional(grad_output, "grad_output"),
                                    _optional(grad_h_n, "grad_h_n"),
                                    _optional(grad_c_n, "grad_c_n"), int(threads))
        return {k: tape._wrap(v) for k, v in grads.items()}


def _split_hx(hx):
    """(h0, c0) from nn.LSTM's hx argument: None, or a pair whose entries may be None."""
    if hx is None:
        return None, None
    if not isinstance(hx, (tuple, list)) or len(hx) != 2:
        raise Error(f"hx: expected None or a pair (h0, c0), got {type(hx).__name__}")
    return hx[0], hx[1]


class LSTMCell:
    """torch.nn.LSTMCell on NumPy arrays (or CPU torch tensors): one step of one layer.

    Weights packed once when made or loaded: a loop of calls repacks nothing."""

    def __init__(self, input_size, hidden_size, bias=True, dtype="float32", seed=0):
        self.bias = bool(bias)
        self._core = _grux.LstmCell(int(input_size), int(hidden_size), self.bias,
                                    _dtype_name(dtype), int(seed))

    input_size = property(lambda self: self._core.input_size)
    hidden_size = property(lambda self: self._core.hidden_size)
    dtype = property(lambda self: self._core.dtype)

    def __repr__(self):
        return (f"grux.LSTMCell({self.input_size}, {self.hidden_size}, bias={self.bias}, "
                f"dtype=\"{self.dtype}\")")

    def load_state_dict(self, state_dict):
        """Weights from nn.LSTMCell's keys (weight_ih, weight_hh, bias_ih, bias_hh)."""
        arrays = _state_arrays(state_dict, "state_dict", "like nn.LSTMCell's state_dict")
        core = _grux.LstmCell.from_state_dict(arrays)
        _check_same_sizes(core, self._core, ("input_size", "hidden_size"), "LSTMCell")
        has_bias = "bias_ih" in arrays
        if has_bias != self.bias:
            raise Error(f"load_state_dict: the weights {'have' if has_bias else 'lack'} biases, "
                        f"this LSTMCell has bias={self.bias}")
        self._core = core

    def state_dict(self):
        return self._core.state_dict()

    def __call__(self, input, hx=None, threads=0):
        """(h', c'): input (N, I) or (I,); hx None or (h, c), each (N, H) or (H,) or None for
        zeros."""
        x, wrap = _to_numpy(input, "input")
        h, c = _split_hx(hx)
        h1, c1 = self._core.forward(x, _optional(h, "hx"), _optional(c, "cx"), int(threads))
        return wrap(h1), wrap(c1)

    forward = __call__

    def backward(self, input, hx, grad_h=None, grad_c=None, threads=0):
        """Gradients of one step given d(loss)/d(h') and/or d(loss)/d(c'): a dict with
        "input", "hx", "cx" and the weights' keys (the step is recomputed)."""
        if grad_h is None and grad_c is None:
            raise Error("backward: give grad_h, grad_c or both (both are None)")
        x, wrap = _to_numpy(input, "input")
        h, c = _split_hx(hx)
        grads = self._core.backward(x, _optional(h, "hx"), _optional(c, "cx"),
                                    _optional(grad_h, "grad_h"), _optional(grad_c, "grad_c"),
                                    int(threads))
        return {k: wrap(v) for k, v in grads.items()}


class LSTMStream(_Stream):
    """A unidirectional LSTM run a frame or a block at a time, keeping its state (h, c) between
    calls: GRUStream's calls and guarantees.

    batch: N >= 1 (frames (N, I), blocks (t, N, I)), or 0 for unbatched frames (I,) and blocks
    (t, I). The stream copies and packs the LSTM's weights when made. One sequence in float32
    without a projection on the calling thread runs grux's real-time kernel; every other stream
    runs the engine's layer kernels (the same bits as LSTM on the whole sequence). threads: 0
    or 1 (every step on the calling thread), or k > 1 (the stream's own team of up to k
    threads, spinning between frames). precision "bf16" or "int8" (a float32 LSTM) converts
    the weights once, here; frames then give LSTM(precision=...)'s results bit for bit."""

    def __init__(self, lstm, batch=1, hx=None, threads=0, precision="f32"):
        if not isinstance(lstm, LSTM):
            raise Error(f"lstm: expected a grux.LSTM, got {type(lstm).__name__}")
        h0, c0 = _split_hx(hx)
        core = _grux.Stream(lstm._core, int(batch), _optional(h0, "h0"), _optional(c0, "c0"),
                            int(threads), str(precision))
        self._start(core, int(batch), lstm.input_size)

    def cell_state(self):
        """The current cell state c (layers, N, H), or (layers, H) unbatched: a copy."""
        return self._core.cell_state()

    def reset(self, hx=None):
        """Back to hx = (h0, c0) (None, or either None: zeros)."""
        h0, c0 = _split_hx(hx)
        self._core.reset(_optional(h0, "h0"), _optional(c0, "c0"))

