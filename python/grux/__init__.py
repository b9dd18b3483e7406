"""grux: fast, exact GRUs and LSTMs for Python, on NumPy arrays and CPU torch tensors.

Arrays cross into the C++ engine without copies (a contiguous or simply strided float32 /
float64 array is read where it lies; results are arrays over grux's own memory), results have
the type of the input (numpy.ndarray in, numpy.ndarray out; torch.Tensor in, torch.Tensor
out), and the GIL is released while grux computes. Errors raise grux.Error, a ValueError whose
message names the argument, what was expected and what was given.

    import grux
    gru = grux.GRU(8, 32, num_layers=2)
    gru.load_state_dict(torch_gru.state_dict())   # nn.GRU's keys, numpy or torch values
    out, h_n = gru(x)                             # x: (T, N, 8)

Also here: GRUCell, GRUStream (a frame or a block at a time); LSTM, LSTMCell and LSTMStream
(nn.LSTM's and nn.LSTMCell's keys, proj_size included); MinGRU; prefix_scan, reduce_scan and
linear_recurrence; conv1d, conv2d and rearrange; cost and profile (the cost model). grux.torch
holds torch.nn.Module versions (grux.torch.GRU, GRUCell, LSTM, LSTMCell, MinGRU) whose forward
and backward run on grux.
"""

import numpy as np

from . import _grux
from ._grux import Error
from ._grux import _step_frame
from ._grux import is_torch_tensor as _is_tensor
from ._util import _check_same_sizes, _dtype_name, _optional, _state_arrays, _to_numpy

__version__ = _grux.__version__
__all__ = ["Error", "GRU", "GRUCell", "GRUStream", "Tape", "simd_target"]


def simd_target():
    """The SIMD instruction set grux's kernels run on here ("AVX3", "AVX2", ...)."""
    return _grux.simd_target()


def _check_state_keys(d, name):
    return _state_arrays(d, name, "like nn.GRU's state_dict")


class Tape:
    """What GRU.forward_train saved for GRU.backward (opaque). Holds the weights it was
    taken with, so a later load_state_dict does not change what backward computes."""

    __slots__ = ("_core", "_tape", "_wrap")

    def __init__(self, core, tape, wrap):
        self._core, self._tape, self._wrap = core, tape, wrap


class GRU:
    """torch.nn.GRU on NumPy arrays (or CPU torch tensors), without autograd.

    Weights are drawn like PyTorch's (uniform in +-1/sqrt(hidden_size), from `seed`) until
    load_state_dict replaces them. reset_before selects the other candidate form
    (n = tanh(W_in x + b_in + W_hn (r * h) + b_hn): ONNX's default, Keras reset_after=False).
    dtype: "float32" or "float64" (numpy and torch dtypes accepted).
    """

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, reset_before=False, dtype="float32", seed=0):
        self.batch_first = bool(batch_first)
        self.dropout = float(dropout)
        self.reset_before = bool(reset_before)
        self._core = _grux.Gru(int(input_size), int(hidden_size), int(num_layers), bool(bias),
                               self.batch_first, self.dropout, bool(bidirectional),
                               self.reset_before, _dtype_name(dtype), int(seed))

    input_size = property(lambda self: self._core.input_size)
    hidden_size = property(lambda self: self._core.hidden_size)
    num_layers = property(lambda self: self._core.num_layers)
    bias = property(lambda self: self._core.bias)
    bidirectional = property(lambda self: self._core.bidirectional)
    dtype = property(lambda self: self._core.dtype)

    def __repr__(self):
        return (f"grux.GRU({self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, "
                f"bias={self.bias}, batch_first={self.batch_first}, dropout={self.dropout}, "
                f"bidirectional={self.bidirectional}, reset_before={self.reset_before}, "
                f"dtype=\"{self.dtype}\")")

    def load_state_dict(self, state_dict):
        """Weights from nn.GRU's state_dict keys (NumPy arrays or torch tensors, all float32 or
        all float64: the GRU takes their dtype). Sizes must match this GRU's; every key must be
        present and no other. The arrays are copied only when not contiguous."""
        arrays = _check_state_keys(state_dict, "state_dict")
        core = _grux.Gru.from_state_dict(arrays, self.batch_first, self.dropout, self.reset_before)
        _check_same_sizes(core, self._core, ("input_size", "hidden_size", "num_layers", "bias",
                                             "bidirectional"), "GRU")
        self._core = core

    def state_dict(self):
        """The weights as NumPy arrays keyed like nn.GRU's (views of this GRU's weights)."""
        return self._core.state_dict()

    def __call__(self, input, h0=None, lengths=None, threads=0, precision="f32"):
        """(output, h_n), as nn.GRU: input (T, N, I), (N, T, I) with batch_first, or (T, I)
        unbatched; h0 (layers * directions, N, H) or None for zeros; lengths (N,) integers in
        [1, T] (any order): output rows past a sequence's length are zero and h_n holds its
        state at its last step. threads: 0 lets grux choose. precision: "f32", or "bf16" /
        "int8" (a float32 GRU: the products with the weights in that precision, the weights
        converted for the call; README, section Precision)."""
        x, wrap = _to_numpy(input, "input")
        out, h_n = self._core.forward(x, _optional(h0, "h0"), _optional(lengths, "lengths", True),
                                      int(threads), str(precision))
        return wrap(out), wrap(h_n)

    forward = __call__

    def forward_train(self, input, h0=None, lengths=None, dropout_seed=0, threads=0,
                      precision="f32"):
        """(output, h_n, tape): as __call__, with dropout between layers (mask drawn from
        dropout_seed), saving in tape what backward needs. precision "bf16" (a float32 GRU)
        trains with the products in bf16; backward then runs in bf16 too."""
        x, wrap = _to_numpy(input, "input")
        out, h_n, tape = self._core.forward_train(
            x, _optional(h0, "h0"), _optional(lengths, "lengths", True), int(dropout_seed),
            int(threads), str(precision))
        return wrap(out), wrap(h_n), Tape(self._core, tape, wrap)

    def backward(self, tape, grad_output=None, grad_h_n=None, threads=0):
        """Gradients from d(loss)/d(output) and/or d(loss)/d(h_n) (shapes as forward_train
        returned; at least one): a dict with "input", "h0" and every weight's key."""
        if not isinstance(tape, Tape):
            raise Error(f"tape: expected the Tape forward_train returned, got {type(tape).__name__}")
        if grad_output is None and grad_h_n is None:
            raise Error("backward: give grad_output, grad_h_n or both (both are None)")
        grads = tape._core.backward(tape._tape, _optional(grad_output, "grad_output"),
                                    _optional(grad_h_n, "grad_h_n"), int(threads))
        return {k: tape._wrap(v) for k, v in grads.items()}


class GRUCell:
    """torch.nn.GRUCell on NumPy arrays (or CPU torch tensors): one step of one layer.

    Weights packed once when made or loaded: a loop of calls repacks nothing."""

    def __init__(self, input_size, hidden_size, bias=True, reset_before=False, dtype="float32",
                 seed=0):
        self.reset_before = bool(reset_before)
        self.bias = bool(bias)
        self._core = _grux.GruCell(int(input_size), int(hidden_size), self.bias,
                                   self.reset_before, _dtype_name(dtype), int(seed))

    input_size = property(lambda self: self._core.input_size)
    hidden_size = property(lambda self: self._core.hidden_size)
    dtype = property(lambda self: self._core.dtype)

    def __repr__(self):
        return (f"grux.GRUCell({self.input_size}, {self.hidden_size}, bias={self.bias}, "
                f"reset_before={self.reset_before}, dtype=\"{self.dtype}\")")

    def load_state_dict(self, state_dict):
        """Weights from nn.GRUCell's keys (weight_ih, weight_hh, bias_ih, bias_hh)."""
        core = _grux.GruCell.from_state_dict(_check_state_keys(state_dict, "state_dict"),
                                             self.reset_before)
        _check_same_sizes(core, self._core, ("input_size", "hidden_size"), "GRUCell")
        has_bias = "bias_ih" in state_dict
        if has_bias != self.bias:
            raise Error(f"load_state_dict: the weights {'have' if has_bias else 'lack'} biases, "
                        f"this GRUCell has bias={self.bias}")
        self._core = core

    def state_dict(self):
        return self._core.state_dict()

    def __call__(self, input, hx=None, threads=0):
        """h': input (N, I) or (I,), hx (N, H) or (H,) or None for zeros."""
        x, wrap = _to_numpy(input, "input")
        return wrap(self._core.forward(x, _optional(hx, "hx"), int(threads)))

    forward = __call__

    def backward(self, input, hx, grad_output, threads=0):
        """Gradients of one step given d(loss)/d(h'): a dict with "input", "hx" and the
        weights' keys (the step is recomputed)."""
        x, wrap = _to_numpy(input, "input")
        grads = self._core.backward(x, _optional(hx, "hx"),
                                    _to_numpy(grad_output, "grad_output")[0], int(threads))
        return {k: wrap(v) for k, v in grads.items()}


class _Stream:
    """What GRUStream and LSTMStream share: the per-frame and per-block calls on the C++ stream
    (self._core, a _grux.Stream, and its fast-path handle)."""

    def _start(self, core, batch, input_size):
        self.batch = batch
        self.input_size = input_size
        self._frame_ndim = 1 if batch == 0 else 2
        self._core = core
        self._handle = core.handle()

    def step(self, frame, out=None):
        """One frame: (N, I), or (I,) unbatched; returns the top layer's output (N, H) / (H,)
        (H: the LSTM's proj_size where it has one).

        out: an array or tensor of the output's shape and the stream's dtype, C-contiguous, to
        write the output into (and return) instead of making a new one each frame."""
        # The common case first and short: a contiguous array or tensor of one frame.
        y = _step_frame(self._handle, frame, out)
        if y is not None:
            return y
        x, wrap = _to_numpy(frame, "frame")
        if x.ndim != self._frame_ndim:
            shape = "(I,)" if self.batch == 0 else "(N, I)"
            raise Error(f"frame: expected one frame of shape {shape}, got shape {tuple(x.shape)}")
        return wrap(self._core.step(x)) if out is None else self._core.step(x, out)

    def process(self, block, out=None):
        """A block of frames (t, N, I), or (t, I) unbatched; returns (t, N, H) / (t, H).

        out: as step's, of the block's output shape."""
        x, wrap = _to_numpy(block, "block")
        if x.ndim != self._frame_ndim + 1:
            shape = "(t, I)" if self.batch == 0 else "(t, N, I)"
            raise Error(f"block: expected frames of shape {shape}, got shape {tuple(x.shape)}")
        if out is not None:
            return self._core.step(block if _is_tensor(block) else x, out)
        return wrap(self._core.step(x))

    def state(self):
        """The current state h (layers, N, H), or (layers, H) unbatched: a copy."""
        return self._core.state()


class GRUStream(_Stream):
    """A unidirectional GRU run a frame or a block at a time, keeping its state between calls.

    batch: N >= 1 (frames (N, I), blocks (t, N, I)), or 0 for unbatched frames (I,) and blocks
    (t, I). The stream copies and packs the GRU's weights when made (later changes to `gru` are
    not seen). One sequence in float32 runs grux's real-time kernel. precision "bf16" or "int8"
    (a float32 GRU) converts the weights once, here; frames then give GRU(precision=...)'s
    results bit for bit."""

    def __init__(self, gru, batch=1, h0=None, threads=0, precision="f32"):
        if not isinstance(gru, GRU):
            raise Error(f"gru: expected a grux.GRU, got {type(gru).__name__}")
        core = _grux.Stream(gru._core, int(batch), _optional(h0, "h0"), int(threads),
                            str(precision))
        self._start(core, int(batch), gru.input_size)

    def reset(self, h0=None):
        """Back to h0 (None: zeros)."""
        self._core.reset(_optional(h0, "h0"))


# The other areas, each in its own module (their names are listed in each module's __all__).
from ._scan import *  # noqa: E402,F401,F403
from ._mingru import *  # noqa: E402,F401,F403
from ._conv import *  # noqa: E402,F401,F403
from ._cost import *  # noqa: E402,F401,F403
from ._lstm import *  # noqa: E402,F401,F403
from ._model import *  # noqa: E402,F401,F403
from . import _scan, _mingru, _conv, _cost, _lstm, _model  # noqa: E402

__all__ += (_scan.__all__ + _mingru.__all__ + _conv.__all__ + _cost.__all__ + _lstm.__all__ +
            _model.__all__)


def __getattr__(name):
    # grux.torch on first use (import grux; grux.torch.GRU(...)), so that `import grux` does
    # not import torch for those who never use it.
    if name == "torch":
        import importlib

        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'grux' has no attribute {name!r}")
