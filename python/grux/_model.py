"""Model files: grux.load(path) reads RTNeural JSON, GuitarML JSON, a bare state-dict JSON, a
Neural Amp Modeler .nam (LSTM) or safetensors (docs/formats.md) and gives a grux.Model, run on
NumPy arrays (or CPU torch tensors) by .process(x) or frame by frame by a .stream(batch).
See include/grux/model.h.
"""
import numpy as np

from . import _grux
from ._util import _to_numpy

__all__ = ["Model", "ModelStream", "load"]


def load(path, inputs=None):
    """The model in the file at `path` (its format told from the content): a grux.Model.
    inputs: for an ONNX graph, the values of its inputs other than the frames (weights, or
    sequence_lens and initial states), by name, as NumPy arrays. Raises grux.Error with one
    line naming what was wrong."""
    return Model(path, inputs)


class Model:
    """A model read from a file: input_size features a frame in, output_size out.

    layers: a list of dicts (kind, in_size, out_size, form or activation, tensors as NumPy
    arrays in PyTorch's layout); skip: the input features added to the output; sample_rate
    (0 where the file does not say); format; name."""

    def __init__(self, path, inputs=None):
        given = {}
        for name, value in (inputs or {}).items():
            a = np.asarray(value)
            # Integers (sequence_lens) as int64; floats as given.
            given[str(name)] = (a.astype(np.int64) if a.dtype.kind in "iub"
                                else _to_numpy(value, str(name))[0])
        self._core = _grux.Model(str(path), given)

    input_size = property(lambda self: self._core.input_size)
    output_size = property(lambda self: self._core.output_size)
    format = property(lambda self: self._core.format)
    sample_rate = property(lambda self: self._core.sample_rate)
    skip = property(lambda self: self._core.skip)
    name = property(lambda self: self._core.name)
    parameters = property(lambda self: self._core.parameters)
    layers = property(lambda self: self._core.layers)
    # An ONNX graph's frames input and its outputs' names ("" and [] for the other formats).
    graph_input = property(lambda self: self._core.graph_input)
    graph_outputs = property(lambda self: self._core.graph_outputs)

    def process(self, x, threads=0):
        """x: float32 (T, input_size) for one sequence or (T, N, input_size) for N, from the
        initial state (the file's, or zeros). Returns (T, output_size) or (T, N, output_size)."""
        a, wrap = _to_numpy(x, "x")
        return wrap(self._core.process(a, int(threads)))

    def run(self, x, threads=0):
        """An ONNX graph on its frames input x (laid out as the graph's input is, float32 or
        float64), from the initial state: a dict of every graph output by name, each laid out
        as the graph declares it (float64 for a float64 x)."""
        a, _ = _to_numpy(x, "x")
        return self._core.run(a, int(threads))

    def stream(self, batch=1, precision="f32", threads=0, sample_rate=0,
               correction="lin_interp", warmup_frames=0):
        """A grux.ModelStream of `batch` sequences from the initial state. sample_rate: the rate
        the stream runs at (0: the model's); a higher one than the model was trained at gets
        RTNeural's sample-rate correction ("lin_interp", "no_interp" for whole ratios, or
        "none"). warmup_frames: zeros run first, their final state the one reset() returns to.
        """
        return ModelStream(self, batch, precision, threads, sample_rate, correction,
                           warmup_frames)

    def save(self, path):
        """Writes the model as safetensors (what `grux model convert` writes), atomically."""
        self._core.save(str(path))

    def save_onnx(self, path):
        """Writes the model as an ONNX graph of opset 14 (what `grux model export-onnx`
        writes), atomically: input "x" (time, batch, input_size), output "y"."""
        self._core.save_onnx(str(path))

    def __repr__(self):
        kinds = ", ".join(layer["kind"] for layer in self.layers)
        return (f"grux.Model({self.format}, {self.input_size} -> {self.output_size}: "
                f"{kinds})")


class ModelStream:
    """The state of `batch` sequences through a grux.Model, kept between calls: step(frames)
    takes (t, batch, input_size) (or (t, input_size) for batch 1) and returns the outputs;
    the bits do not depend on how the frames are split. reset() returns to the initial state."""

    def __init__(self, model, batch=1, precision="f32", threads=0, sample_rate=0,
                 correction="lin_interp", warmup_frames=0):
        self._core = _grux.ModelStream(model._core, int(batch), str(precision), int(threads),
                                       float(sample_rate), str(correction), int(warmup_frames))

    batch = property(lambda self: self._core.batch)
    rate_ratio = property(lambda self: self._core.rate_ratio)
    input_size = property(lambda self: self._core.input_size)
    output_size = property(lambda self: self._core.output_size)

    def step(self, frames):
        a, wrap = _to_numpy(frames, "frames")
        return wrap(self._core.step(a))

    def reset(self):
        self._core.reset()
