"""grux.GRU, grux.GRUCell and grux.GRUStream on NumPy arrays, against torch.nn.GRU /
nn.GRUCell (Debian's python3-torch) run on the same weights; zero-copy, the GIL, errors."""

import numpy as np
import pytest
import torch

import grux
from gil_check import ticks_during

TOL = {np.float32: 2e-5, np.float64: 1e-12}


def torch_dtype(dtype):
    return torch.float32 if dtype == np.float32 else torch.float64


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layers,bidirectional,batch_first", [(1, False, False), (2, True, False),
                                                             (2, False, True)])
def test_gru_matches_torch(dtype, layers, bidirectional, batch_first):
    torch.manual_seed(1)
    ref = torch.nn.GRU(5, 7, num_layers=layers, bidirectional=bidirectional,
                       batch_first=batch_first).to(torch_dtype(dtype))
    gru = grux.GRU(5, 7, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first,
                   dtype=dtype)
    gru.load_state_dict(ref.state_dict())
    assert gru.dtype == np.dtype(dtype).name
    D = 2 if bidirectional else 1
    x = np.random.default_rng(0).standard_normal((3, 9, 5) if batch_first else (9, 3, 5)).astype(dtype)
    h0 = np.random.default_rng(1).standard_normal((layers * D, 3, 7)).astype(dtype)
    out, h_n = gru(x, h0)
    assert isinstance(out, np.ndarray) and out.dtype == dtype
    with torch.no_grad():
        r_out, r_h = ref(torch.from_numpy(x), torch.from_numpy(h0))
    np.testing.assert_allclose(out, r_out.numpy(), atol=TOL[dtype], rtol=0)
    np.testing.assert_allclose(h_n, r_h.numpy(), atol=TOL[dtype], rtol=0)
    # torch tensors in: torch tensors out, the same numbers.
    t_out, t_h = gru(torch.from_numpy(x), torch.from_numpy(h0))
    assert isinstance(t_out, torch.Tensor) and isinstance(t_h, torch.Tensor)
    np.testing.assert_array_equal(t_out.numpy(), out)


def test_gru_lengths_and_unbatched():
    torch.manual_seed(2)
    ref = torch.nn.GRU(4, 6).double()
    gru = grux.GRU(4, 6, dtype="float64")
    gru.load_state_dict(ref.state_dict())
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 3, 4))
    lengths = [5, 8, 2]
    out, h_n = gru(x, lengths=lengths)
    packed = torch.nn.utils.rnn.pack_padded_sequence(torch.from_numpy(x), torch.tensor(lengths),
                                                     enforce_sorted=False)
    with torch.no_grad():
        r_out, r_h = ref(packed)
    r_pad, _ = torch.nn.utils.rnn.pad_packed_sequence(r_out, total_length=8)
    np.testing.assert_allclose(out, r_pad.numpy(), atol=1e-12, rtol=0)
    np.testing.assert_allclose(h_n, r_h.numpy(), atol=1e-12, rtol=0)
    assert np.all(out[5:, 0] == 0) and np.all(out[2:, 2] == 0)
    # Unbatched (T, I).
    u_out, u_h = gru(x[:, 1])
    assert u_out.shape == (8, 6) and u_h.shape == (1, 6)
    np.testing.assert_allclose(u_out, out[:, 1], atol=1e-12, rtol=0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gru_backward_matches_torch(dtype):
    torch.manual_seed(4)
    ref = torch.nn.GRU(3, 5, num_layers=2, bidirectional=True).to(torch_dtype(dtype))
    gru = grux.GRU(3, 5, num_layers=2, bidirectional=True, dtype=dtype)
    gru.load_state_dict(ref.state_dict())
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 2, 3)).astype(dtype)
    h0 = rng.standard_normal((4, 2, 5)).astype(dtype)
    gout = rng.standard_normal((6, 2, 10)).astype(dtype)
    gh = rng.standard_normal((4, 2, 5)).astype(dtype)
    out, h_n, tape = gru.forward_train(x, h0)
    grads = gru.backward(tape, gout, gh)
    tx = torch.from_numpy(x).requires_grad_()
    th = torch.from_numpy(h0).requires_grad_()
    r_out, r_h = ref(tx, th)
    torch.autograd.backward([r_out, r_h], [torch.from_numpy(gout), torch.from_numpy(gh)])
    tol = 1e-4 if dtype == np.float32 else 1e-11
    np.testing.assert_allclose(out, r_out.detach().numpy(), atol=tol, rtol=0)
    np.testing.assert_allclose(grads["input"], tx.grad.numpy(), atol=tol, rtol=0)
    np.testing.assert_allclose(grads["h0"], th.grad.numpy(), atol=tol, rtol=0)
    names = dict(ref.named_parameters())
    assert set(grads) == set(names) | {"input", "h0"}
    for k, p in names.items():
        np.testing.assert_allclose(grads[k], p.grad.numpy(), atol=tol, rtol=0, err_msg=k)
    # Only grad_h_n.
    g2 = gru.backward(tape, grad_h_n=gh)
    assert g2["input"].shape == x.shape


def test_state_dict_round_trip_and_views():
    gru = grux.GRU(3, 4, num_layers=2, seed=7)
    sd = gru.state_dict()
    assert sorted(sd) == sorted(torch.nn.GRU(3, 4, num_layers=2).state_dict())
    ref = torch.nn.GRU(3, 4, num_layers=2)
    ref.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in sd.items()})
    x = np.random.default_rng(8).standard_normal((5, 2, 3)).astype(np.float32)
    with torch.no_grad():
        np.testing.assert_allclose(gru(x)[0], ref(torch.from_numpy(x))[0].numpy(), atol=2e-5)
    # Loading keeps the arrays' memory: the weights are views, not copies.
    w = {k: v.copy() for k, v in sd.items()}
    gru.load_state_dict(w)
    assert np.shares_memory(gru.state_dict()["weight_hh_l1"], w["weight_hh_l1"])


def test_zero_copy_outputs_and_inputs():
    gru = grux.GRU(4, 8)
    x = np.random.default_rng(9).standard_normal((6, 2, 4)).astype(np.float32)
    out, _ = gru(x)
    # The output array's memory is grux's Tensor, held by the array's base.
    assert out.base is not None and out.flags.writeable
    t_out, _ = gru(torch.from_numpy(x))
    assert np.shares_memory(t_out.numpy(), t_out.numpy())
    # A strided input (every other time step) is read in place and gives the same result as a copy.
    big = np.random.default_rng(10).standard_normal((12, 2, 4)).astype(np.float32)
    np.testing.assert_array_equal(gru(big[::2])[0], gru(np.ascontiguousarray(big[::2]))[0])
    # An input that is not 64-byte aligned (offset by one float).
    raw = np.zeros(6 * 2 * 4 + 1, np.float32)
    mis = raw[1:].reshape(6, 2, 4)
    mis[...] = x
    np.testing.assert_array_equal(gru(mis)[0], gru(x)[0])


def test_gil_released_while_computing():
    gru = grux.GRU(256, 256, num_layers=2)
    x = np.random.default_rng(11).standard_normal((400, 16, 256)).astype(np.float32)
    n, alone = ticks_during(lambda: gru(x, threads=1))
    assert alone > 0.02, "problem too small to observe the GIL"
    assert n >= 5, f"{n} ticks in {alone:.3f} s"


def test_gru_cell_matches_torch():
    torch.manual_seed(12)
    ref = torch.nn.GRUCell(5, 9).double()
    cell = grux.GRUCell(5, 9, dtype=np.float64)
    cell.load_state_dict(ref.state_dict())
    rng = np.random.default_rng(13)
    x, h = rng.standard_normal((3, 5)), rng.standard_normal((3, 9))
    tx, th = torch.from_numpy(x).requires_grad_(), torch.from_numpy(h).requires_grad_()
    r = ref(tx, th)
    np.testing.assert_allclose(cell(x, h), r.detach().numpy(), atol=1e-12, rtol=0)
    g = rng.standard_normal((3, 9))
    r.backward(torch.from_numpy(g))
    grads = cell.backward(x, h, g)
    np.testing.assert_allclose(grads["input"], tx.grad.numpy(), atol=1e-12)
    np.testing.assert_allclose(grads["hx"], th.grad.numpy(), atol=1e-12)
    for k, p in ref.named_parameters():
        np.testing.assert_allclose(grads[k], p.grad.numpy(), atol=1e-12, err_msg=k)
    assert cell(x[0]).shape == (9,)


def test_stream_equals_whole_sequence():
    torch.manual_seed(14)
    gru = grux.GRU(3, 6, num_layers=2, dtype="float64")
    x = np.random.default_rng(15).standard_normal((10, 2, 3))
    whole, _ = gru(x)
    s = grux.GRUStream(gru, batch=2)
    frames = [s.step(x[t]) for t in range(4)]
    block = s.process(x[4:])
    got = np.concatenate([np.stack(frames), block])
    np.testing.assert_array_equal(got, whole)  # f64 streams are bit-identical
    assert s.state().shape == (2, 2, 6)
    s.reset()
    np.testing.assert_array_equal(s.process(x), whole)
    # One f32 sequence (the real-time kernel): within f32 rounding of the engine.
    g32 = grux.GRU(3, 6)
    u = grux.GRUStream(g32, batch=0)
    xs = x[:, 0].astype(np.float32)
    np.testing.assert_allclose(np.stack([u.step(f) for f in xs]), g32(xs)[0], atol=2e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batch", [0, 1, 3])
def test_stream_fast_path_equals_tensor_path(dtype, batch):
    """step/process hand C-contiguous arrays of the stream's dtype straight to the engine;
    other layouts (strided, misaligned, torch tensors, a batch_first GRU's blocks) go through
    Tensors. Both must give the same bits, and shape errors must still be reported."""
    gru = grux.GRU(4, 5, num_layers=2, dtype=dtype)
    rng = np.random.default_rng(16)
    shape = (7, 4) if batch == 0 else (7, batch, 4)
    x = rng.standard_normal(shape).astype(dtype)
    fast, slow = grux.GRUStream(gru, batch=batch), grux.GRUStream(gru, batch=batch)
    strided = np.repeat(x, 2, axis=-1)[..., ::2]  # same values, not contiguous
    assert not strided.flags.c_contiguous
    raw = np.zeros(x.nbytes + 1, np.uint8)  # the same values at an odd address
    misaligned = raw[1:].view(dtype).reshape(x.shape)
    misaligned[...] = x
    a = np.stack([fast.step(x[t]) for t in range(3)] + list(fast.process(x[3:5]))
                 + [fast.step(x[5]), fast.step(x[6])])
    b = np.stack([slow.step(strided[t]) for t in range(3)] + list(slow.process(misaligned[3:5]))
                 + [slow.step(torch.from_numpy(x[5])).numpy(), slow.step(strided[6])])
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(fast.state(), slow.state())
    np.testing.assert_allclose(a, gru(x)[0], atol=3e-6 if dtype == np.float32 else 1e-13)
    with pytest.raises(grux.Error, match="frames"):
        fast.step(np.zeros(shape[1:-1] + (3,), dtype))  # wrong input size: the engine's error
    if batch > 1:
        with pytest.raises(grux.Error, match="frames"):
            fast.step(np.zeros((batch + 1, 4), dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batch", [0, 2])
def test_stream_torch_frames_and_out(dtype, batch):
    """Torch frames are read through data_ptr (contiguous: the fast path; strided: a Tensor
    over the tensor's strides) and give torch results with the same bits as arrays; `out`
    takes the result in place, for arrays and tensors, frames and blocks."""
    gru = grux.GRU(4, 5, dtype=dtype)
    rng = np.random.default_rng(18)
    shape = (6, 4) if batch == 0 else (6, batch, 4)
    x = rng.standard_normal(shape).astype(dtype)
    want = grux.GRUStream(gru, batch=batch).process(x)
    xt = torch.from_numpy(x)
    strided = torch.from_numpy(np.repeat(x, 2, axis=-1))[..., ::2]
    assert not strided.is_contiguous()
    s = grux.GRUStream(gru, batch=batch)
    got = [s.step(xt[0]), s.step(strided[1]), s.step(xt[2].clone().requires_grad_(True))]
    assert all(type(g) is torch.Tensor and not g.requires_grad for g in got)
    out_np = np.full(want.shape[1:], np.nan, dtype)
    out_t = torch.full(want.shape[1:], float("nan"), dtype=torch_dtype(dtype))
    assert s.step(xt[3], out=out_np) is out_np
    got += [torch.from_numpy(out_np.copy())]
    assert s.step(x[4], out=out_t) is out_t
    got += [out_t.clone()]
    assert s.step(strided[5], out=out_t) is out_t  # the general path, copied into out
    got += [out_t.clone()]
    np.testing.assert_array_equal(torch.stack(got).numpy(), want)
    s.reset()
    block_out = torch.empty(want.shape, dtype=torch_dtype(dtype))
    assert s.process(xt, out=block_out) is block_out
    np.testing.assert_array_equal(block_out.numpy(), want)
    s.reset()
    assert s.process(strided, out=block_out) is block_out
    np.testing.assert_array_equal(block_out.numpy(), want)


def test_stream_out_errors():
    gru = grux.GRU(4, 4)
    s = grux.GRUStream(gru, batch=1)
    frame = np.zeros((1, 4), np.float32)
    for bad, words in [(np.zeros((1, 5), np.float32), "of shape (1, 4)"),
                       (np.zeros((1, 4), np.float64), "float32"),
                       (np.zeros((1, 8), np.float32)[:, ::2], "not C-contiguous"),
                       ([0.0] * 4, "got list"),
                       (torch.zeros(1, 4, requires_grad=True), "requires grad"),
                       (frame, "overlaps the frames")]:
        with pytest.raises(grux.Error, match="^out: ") as e:
            s.step(frame, out=bad)
        assert words in str(e.value), str(e.value)
    with pytest.raises(grux.Error, match="out: .*of shape \\(3, 1, 4\\)"):
        s.process(np.zeros((3, 1, 4), np.float32), out=np.zeros((3, 4), np.float32))
    read_only = np.zeros((1, 4), np.float32)
    read_only.flags.writeable = False
    with pytest.raises(grux.Error, match="out: the array is read-only"):
        s.step(frame, out=read_only)
    # A refused out loses no step, on the fast path and on the strided one alike.
    strided = np.ones((1, 8), np.float32)[:, ::2]
    for f in (np.ones((1, 4), np.float32), strided):
        with pytest.raises(grux.Error, match="^out: "):
            s.step(f, out=np.zeros((1, 5), np.float32))
        np.testing.assert_array_equal(s.state(), np.zeros((1, 1, 4), np.float32))


def test_torch_tensors_are_read_in_place():
    """A CPU tensor of any strides is read through data_ptr, as NumPy arrays are."""
    gru = grux.GRU(3, 4, dtype="float64")
    x = np.random.default_rng(19).standard_normal((5, 2, 3))
    want, _ = gru(x)
    permuted = torch.from_numpy(np.ascontiguousarray(x.transpose(1, 0, 2))).permute(1, 0, 2)
    assert not permuted.is_contiguous()
    got, _ = gru(permuted)
    assert type(got) is torch.Tensor
    np.testing.assert_array_equal(got.numpy(), want)
    expanded = torch.from_numpy(x[:1, :1]).expand(5, 2, 3)  # stride 0
    np.testing.assert_array_equal(gru(expanded)[0].numpy(), gru(np.broadcast_to(x[:1, :1], x.shape).copy())[0])


def test_stream_of_a_batch_first_gru_takes_batch_first_blocks():
    gru = grux.GRU(3, 4, batch_first=True, dtype="float64")
    x = np.random.default_rng(17).standard_normal((2, 6, 3))  # (N, t, I)
    s = grux.GRUStream(gru, batch=2)
    np.testing.assert_array_equal(s.process(x), gru(x)[0])


@pytest.mark.parametrize("call,message", [
    (lambda g: g(np.zeros((5, 2, 4), np.float32)), "input_size 3"),
    (lambda g: g(np.zeros((5, 2, 3), np.int32)), None),
    (lambda g: g(np.zeros((5, 2, 3), np.float16)), "dtype float16 is not supported"),
    (lambda g: g(np.zeros((5, 2, 3), np.float64)), "f64"),
    (lambda g: g(np.zeros((5, 2, 3), np.float32), np.zeros((1, 3, 4), np.float32)), "h0"),
    (lambda g: g(np.zeros((5, 2, 3), np.float32), lengths=[6, 1]), "lengths"),
    (lambda g: g(np.zeros((5, 2, 3), np.float32), lengths=[0, 1]), "lengths"),
    (lambda g: g("not an array"), "input: expected an array or a tensor, got str"),
    (lambda g: g.load_state_dict({"weight_ih_l0": np.zeros((12, 3), np.float32)}), "weight_hh_l0"),
    (lambda g: g.load_state_dict(grux.GRU(3, 5).state_dict()), "hidden_size"),
    (lambda g: g.backward("tape", np.zeros(1)), "tape"),
    (lambda g: grux.GRU(3, 0), "hidden_size"),
    (lambda g: grux.GRU(3, 4, dtype="int8"), "dtype"),
    (lambda g: grux.GRUStream(g, batch=1).step(np.zeros((3,), np.float32)), "frame"),
    (lambda g: grux.GRUStream("gru"), "grux.GRU"),
])
def test_errors_name_the_argument(call, message):
    gru = grux.GRU(3, 4)
    with pytest.raises(grux.Error) as e:
        call(gru)
    assert isinstance(e.value, ValueError)
    text = str(e.value)
    assert "\n" not in text and text
    if message:
        assert message in text, text


def test_cuda_and_int_tensors_are_refused():
    gru = grux.GRU(3, 4)
    with pytest.raises(grux.Error, match="torch.float32 or torch.float64"):
        gru(torch.zeros(5, 2, 3, dtype=torch.int32))
    meta = torch.zeros(5, 2, 3, device="meta")
    with pytest.raises(grux.Error, match="meta.*grux runs on the CPU"):
        gru(meta)


@pytest.mark.parametrize("precision,tol", [("bf16", 2e-2), ("int8", 5e-2)])
def test_gru_precision_near_f32_and_stream_equal(precision, tol):
    """bf16 / int8: near the f32 result and not equal to it; a stream of that precision gives
    the same bits frame by frame; bf16 training's gradients near f32's."""
    gru = grux.GRU(6, 20, num_layers=2, seed=3)
    x = np.random.default_rng(4).uniform(-1, 1, (12, 3, 6)).astype(np.float32)
    f32, _ = gru(x)
    low, h_n = gru(x, precision=precision)
    err = np.abs(low - f32).max()
    assert 1e-6 < err <= tol
    stream = grux.GRUStream(gru, batch=3, precision=precision)
    frames = np.stack([stream.step(x[t]) for t in range(12)])
    np.testing.assert_array_equal(frames, low)
    if precision == "bf16":
        dy = np.random.default_rng(5).standard_normal(f32.shape).astype(np.float32)
        grads = {}
        for p in ("f32", "bf16"):
            _, _, tape = gru.forward_train(x, precision=p)
            grads[p] = gru.backward(tape, dy)
        for k, g in grads["f32"].items():
            scale = np.abs(g).max()
            assert np.abs(grads["bf16"][k] - g).max() <= 3e-2 * scale, k
    else:
        with pytest.raises(grux.Error, match="int8 is for inference"):
            gru.forward_train(x, precision="int8")


def test_gru_precision_errors():
    x = np.zeros((2, 1, 3))
    gru64 = grux.GRU(3, 4, dtype="float64")
    with pytest.raises(grux.Error, match="precision bf16 takes an f32 GRU; this one is f64"):
        gru64(x, precision="bf16")
    with pytest.raises(grux.Error, match="expected f32, bf16 or int8"):
        grux.GRU(3, 4)(x.astype(np.float32), precision="fp8")
    with pytest.raises(grux.Error, match="takes an f32 GRU"):
        grux.GRUStream(gru64, precision="int8")


def test_stream_fast_path_handle():
    """GRUStream.step's fast path (grux._grux._step_frame, a plain CPython function) keeps its
    stream alive through the handle, refuses anything that is not a handle in one line, and
    gives the same bits as the general path (a strided frame)."""
    from grux._grux import _step_frame
    gru = grux.GRU(3, 4)
    x = np.random.default_rng(5).uniform(-1, 1, (6, 2, 3)).astype(np.float32)
    st = grux.GRUStream(gru, batch=2)
    h = st._handle
    del st
    fast = [_step_frame(h, x[i], None) for i in range(3)]
    ref = grux.GRUStream(gru, batch=2)
    slow = [ref.step(np.asfortranarray(x[i])) for i in range(3)]  # not C-contiguous: general path
    for a, b in zip(fast, slow):
        np.testing.assert_array_equal(a, b)
    assert _step_frame(h, x[0].astype(np.float64), None) is None  # another dtype: not taken
    with pytest.raises(ValueError):
        _step_frame(object(), x[0], None)
    with pytest.raises(TypeError):
        _step_frame(h, x[0])
