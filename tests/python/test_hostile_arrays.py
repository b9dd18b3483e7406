"""Hostile arrays at the Python package's entry points: negative and zero strides, zero-size
dimensions, huge shapes, object, big-endian and integer dtypes, read-only outputs, and arrays
dropped by another thread while grux computes without the GIL. Each call gives an error
(grux.Error, or Python's own TypeError / ValueError) or the result of the same values given
as a plain contiguous array; never a crash."""
import gc
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import grux

MODELS = os.path.join(os.path.dirname(__file__), "..", "reference", "models", "files")


def _gru():
    return grux.GRU(3, 5, num_layers=1, seed=1)


def _model():
    return grux.load(os.path.join(MODELS, "rtneural_gru.json"))


def _runners():
    gru, model = _gru(), _model()
    return {
        "GRU": (lambda x: gru(x)[0], (7, 2, 3)),
        "Model.process": (model.process, (9, 2, model.input_size)),
        "rearrange": (lambda x: grux.rearrange(x, "a b c -> c (a b)"), (4, 3, 2)),
        "prefix_scan": (lambda x: grux.prefix_scan(x, "sum", dim=0), (6, 4, 2)),
    }


def _same_or_error(run, x):
    """run(x) equals run of a contiguous copy, or raises an error of grux's or Python's."""
    try:
        got = run(x)
    except (grux.Error, TypeError, ValueError, OverflowError, MemoryError):
        return
    want = run(np.ascontiguousarray(x))
    assert np.array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("name", list(_runners()))
def test_strides_of_every_kind(name):
    run, shape = _runners()[name]
    rng = np.random.default_rng(0)
    base = rng.uniform(-1, 1, tuple(2 * s for s in shape)).astype(np.float32)
    views = {
        "negative": base[::-1, ::-2, ::-1][: shape[0], : shape[1], : shape[2]],
        "every other": base[::2, ::2, ::2],
        "zero stride": np.broadcast_to(base[:1, :1, : shape[2]], shape),
        "transposed": rng.uniform(-1, 1, shape[::-1]).astype(np.float32).transpose(2, 1, 0),
    }
    for label, v in views.items():
        assert v.shape == shape, label
        _same_or_error(run, v)


@pytest.mark.parametrize("name", list(_runners()))
def test_odd_dtypes_and_shapes(name):
    run, shape = _runners()[name]
    x = np.ones(shape, np.float32)
    for bad in (x.astype(">f4"), x.astype(np.float16), x.astype(object), x.astype(np.int32),
                x.astype(np.complex64), np.array("text"), x[..., None], x[0]):
        _same_or_error(run, bad)
    # Zero-size dimensions: refused or empty, as the contiguous array gives.
    for k in range(3):
        empty = list(shape)
        empty[k] = 0
        _same_or_error(run, np.zeros(empty, np.float32))


def test_huge_shapes_are_refused_at_once():
    """A view of 3 x 2^40 elements over one float (zero strides): a GRU over it needs terabytes
    for its output, refused at once (not hours of bookkeeping first); rearrange merges its
    zero strides into a view, without allocating."""
    huge = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape=(1 << 20, 1 << 20, 3),
                                           strides=(0, 0, 0))
    with pytest.raises((grux.Error, MemoryError, ValueError)):
        _gru()(huge)
    flat = grux.rearrange(huge, "a b c -> (a b c)")
    assert flat.shape == (3 << 40,) and flat.strides == (0,)


def test_read_only_and_wrong_outputs_of_a_stream():
    s = grux.GRUStream(_gru(), 1)
    frame = np.ones((1, 3), np.float32)
    out = np.zeros((1, 5), np.float32)
    out.setflags(write=False)
    with pytest.raises(grux.Error, match="read-only"):
        s.step(frame, out=out)
    for bad in (np.zeros((1, 4), np.float32), np.zeros((1, 5), np.float64),
                np.zeros((5, 2), np.float32)[:, :1].T):
        with pytest.raises((grux.Error, ValueError, TypeError)):
            s.step(frame, out=bad)


def test_arrays_dropped_by_another_thread_while_grux_computes():
    """grux keeps what it reads alive while it runs without the GIL: another thread giving a
    torch input other storage (x.set_(), which frees the old one) or dropping every other
    reference to a NumPy input, and collecting, changes nothing under the computation."""
    torch = pytest.importorskip("torch")
    import time

    gru = grux.GRU(64, 128, seed=2)
    shape = (2000, 4, 64)  # tens of milliseconds of work
    want = gru(np.full(shape, 0.5, np.float32))[0]
    overlapped = 0
    for kind in ("torch", "numpy") * 3:
        holder = {"x": torch.full(shape, 0.5) if kind == "torch"
                  else np.full(shape, 0.5, np.float32)}
        started, stop = threading.Event(), threading.Event()

        def drop():
            x = holder.pop("x")
            started.set()
            time.sleep(0.005)  # grux has taken the input by now, and computes
            if kind == "torch":
                x.set_()  # the old storage is freed unless grux holds it
            del x
            while not stop.is_set():
                gc.collect()
                junk = [np.full(4096, -1.0, np.float32) for _ in range(64)]  # reuse freed memory
                del junk

        arg = holder["x"]
        t = threading.Thread(target=drop)
        t.start()
        started.wait()
        try:
            y = gru(arg)[0]
        except grux.Error:  # the storage went before grux took it: the input was then empty
            y = None
        stop.set()
        t.join()
        if y is None:
            continue
        overlapped += 1
        got = y.numpy() if kind == "torch" else y
        assert np.array_equal(got, want), kind
    assert overlapped >= 3


_CAPPED = r"""
import resource, sys
import numpy as np
import grux

def refused(call):
    try:
        call()
    except (MemoryError, grux.Error) as e:
        assert isinstance(e, MemoryError) or "out of memory" in str(e), e
        return
    raise AssertionError("not refused")

with open("/proc/self/statm") as f:
    pages = int(f.read().split()[0])
cap = pages * resource.getpagesize() + (256 << 20)
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
refused(lambda: grux.GRU(4096, 4096))  # 400 MB of weights
gru = grux.GRU(3, 5, seed=1)
wide = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape=(100, 1 << 20, 3),
                                       strides=(0, 0, 0))
refused(lambda: gru(wide))  # 2 GB of output over an input that takes no memory
refused(lambda: grux.GRUStream(gru, 1 << 24))  # 320 MB of state
x = np.ones((7, 2, 3), np.float32)
assert np.array_equal(gru(x)[0], grux.GRU(3, 5, seed=1)(x)[0])
print("ok")
"""


def test_memory_the_system_refuses_is_an_error():
    """Under an address-space cap just above what the process uses (RLIMIT_AS), a model, an
    output or a stream too large for what is left raises MemoryError (or grux.Error saying
    out of memory) and the process goes on computing correctly: no crash."""
    r = subprocess.run([sys.executable, "-c", _CAPPED], capture_output=True, text=True,
                       timeout=120, env=os.environ)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]
