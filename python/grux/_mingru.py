"""minGRU: grux.MinGRU on NumPy arrays (or CPU torch tensors), without autograd.

minGRU (Feng et al. 2024, "Were RNNs All We Needed?") is a GRU whose gates read only the
input; layer k (input width in_k: input_size for k = 0, hidden_size above) has weight_l{k}
(2H, in_k) and bias_l{k} (2H): rows [0, H) give the gate z, rows [H, 2H) the candidate v:
    z_t = sigmoid(W_z x_t + b_z),   v_t = W_h x_t + b_h
    h~_t = v_t                                         (linear variant)
    h~_t = g(v_t), g(v) = v + 0.5 if v >= 0 else sigmoid(v)   (log_space=True)
    h_t = (1 - z_t) * h_{t-1} + z_t * h~_t
The initial state is h0 (zeros if not given) in the linear variant, g(h0) (0.5 if not given)
in the log-space one. See include/grux/mingru.h.
"""
from . import _grux
from ._grux import Error
from ._util import _check_same_sizes, _dtype_name, _optional, _state_arrays, _to_numpy

__all__ = ["MinGRU", "MinGRUTape"]


class MinGRUTape:
    """What MinGRU.forward_train saved for MinGRU.backward (opaque). Holds the weights it was
    taken with, so a later load_state_dict does not change what backward computes."""

    __slots__ = ("_core", "_tape", "_wrap")

    def __init__(self, core, tape, wrap):
        self._core, self._tape, self._wrap = core, tape, wrap


class MinGRU:
    """A stack of minGRU layers on NumPy arrays (or CPU torch tensors), like grux.GRU.

    Weights are uniform in +-1/sqrt(in_k) (nn.Linear's bound), drawn from `seed`, until
    load_state_dict replaces them. dtype: "float32" or "float64" (numpy and torch dtypes
    accepted). log_space selects the variant whose candidate goes through g (see the module's
    docstring). Inputs must have the weights' dtype.
    """

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 log_space=False, dtype="float32", seed=0):
        self.batch_first = bool(batch_first)
        self.log_space = bool(log_space)
        self._core = _grux.MinGru(int(input_size), int(hidden_size), int(num_layers), bool(bias),
                                  self.batch_first, self.log_space, _dtype_name(dtype), int(seed))

    input_size = property(lambda self: self._core.input_size)
    hidden_size = property(lambda self: self._core.hidden_size)
    num_layers = property(lambda self: self._core.num_layers)
    bias = property(lambda self: self._core.bias)
    dtype = property(lambda self: self._core.dtype)

    def __repr__(self):
        return (f"grux.MinGRU({self.input_size}, {self.hidden_size}, "
                f"num_layers={self.num_layers}, bias={self.bias}, "
                f"batch_first={self.batch_first}, log_space={self.log_space}, "
                f"dtype=\"{self.dtype}\")")

    def load_state_dict(self, state_dict):
        """Weights from keys weight_l{k} (2H, in_k) and bias_l{k} (2H) (NumPy arrays or torch
        tensors, all float32 or all float64: the MinGRU takes their dtype). Sizes must match
        this MinGRU's; every key must be present and no other. The arrays are kept, not copied
        (unless not contiguous): later writes to them change this MinGRU's weights."""
        arrays = _state_arrays(state_dict, "state_dict", "weight_l0, bias_l0, ...")
        core = _grux.MinGru.from_state_dict(arrays, self.batch_first, self.log_space)
        _check_same_sizes(core, self._core, ("input_size", "hidden_size", "num_layers", "bias"),
                          "MinGRU")
        self._core = core

    def state_dict(self):
        """The weights as NumPy arrays keyed weight_l{k}, bias_l{k} (views of this MinGRU's
        weights, not copies)."""
        return self._core.state_dict()

    def __call__(self, input, h0=None, lengths=None, threads=0):
        """(output, h_n): input (T, N, I), (N, T, I) with batch_first, or (T, I) unbatched;
        h0 (num_layers, N, H), or (num_layers, H) unbatched, or None for the default;
        lengths (N,) integers in [1, T] (any order): output rows past a sequence's length are
        zero and h_n holds its state at its last step. output (T, N, H) ((N, T, H) with
        batch_first, (T, H) unbatched), h_n (num_layers, N, H) / (num_layers, H): new arrays
        of the input's type. threads: 0 lets grux choose."""
        x, wrap = _to_numpy(input, "input")
        out, h_n = self._core.forward(x, _optional(h0, "h0"),
                                      _optional(lengths, "lengths", True), int(threads))
        return wrap(out), wrap(h_n)

    forward = __call__

    def forward_train(self, input, h0=None, lengths=None, threads=0):
        """(output, h_n, tape): as __call__, saving in tape what backward needs. The tape
        refers to input and h0's memory: do not modify them before backward."""
        x, wrap = _to_numpy(input, "input")
        out, h_n, tape = self._core.forward_train(
            x, _optional(h0, "h0"), _optional(lengths, "lengths", True), int(threads))
        return wrap(out), wrap(h_n), MinGRUTape(self._core, tape, wrap)

    def backward(self, tape, grad_output=None, grad_h_n=None, threads=0):
        """Gradients from d(loss)/d(output) and/or d(loss)/d(h_n) (shapes as forward_train
        returned; at least one): a dict with "input" (input's shape), "h0" (h0's shape, or
        h_n's when h0 was None: the gradient at the default raw h0 = 0) and every weight's
        key, of the forward input's type."""
        if not isinstance(tape, MinGRUTape):
            raise Error(f"tape: expected the MinGRUTape forward_train returned, got "
                        f"{type(tape).__name__}")
        if grad_output is None and grad_h_n is None:
            raise Error("backward: give grad_output, grad_h_n or both (both are None)")
        grads = tape._core.backward(tape._tape, _optional(grad_output, "grad_output"),
                                    _optional(grad_h_n, "grad_h_n"), int(threads))
        return {k: tape._wrap(v) for k, v in grads.items()}
