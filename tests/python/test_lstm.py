"""grux.LSTM, LSTMCell, LSTMStream on NumPy and grux.torch.LSTM / LSTMCell as drop-ins for
torch.nn.LSTM / nn.LSTMCell: outputs, states and gradients against PyTorch's (Debian's
python3-torch) in f32 and f64, PackedSequence, proj_size, streams split any way, errors."""
import copy

import numpy as np
import pytest
import torch
from torch.nn.utils.rnn import pack_sequence

import grux
import grux.torch as gt

TOL = {torch.float32: 2e-5, torch.float64: 1e-12}


def _np_state(module):
    return {k: v.detach().numpy() for k, v in module.state_dict().items()}


def _close(a, b, tol):
    a = a.detach().numpy() if isinstance(a, torch.Tensor) else a
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else b
    assert a.shape == b.shape, (a.shape, b.shape)
    assert np.abs(a - b).max(initial=0) < tol, np.abs(a - b).max()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kwargs", [dict(), dict(num_layers=2, bidirectional=True),
                                    dict(num_layers=2, proj_size=3, batch_first=True),
                                    dict(num_layers=3, bias=False)])
def test_numpy_lstm_matches_nn_lstm(dtype, kwargs):
    torch.manual_seed(0)
    ref = torch.nn.LSTM(4, 6, dtype=dtype, **kwargs)
    ours = grux.LSTM(4, 6, dtype=dtype, **kwargs)
    ours.load_state_dict(_np_state(ref))
    assert ours.proj_size == kwargs.get("proj_size", 0) and ours.dtype == str(dtype)[6:]
    D = 2 if kwargs.get("bidirectional") else 1
    L, H_out = kwargs.get("num_layers", 1), kwargs.get("proj_size") or 6
    x = torch.randn(5, 3, 4, dtype=dtype)
    if kwargs.get("batch_first"):
        x = x.transpose(0, 1).contiguous()
    h0 = torch.randn(L * D, 3, H_out, dtype=dtype)
    c0 = torch.randn(L * D, 3, 6, dtype=dtype)
    with torch.no_grad():
        for hx in [None, (h0, c0)]:
            o1, (h1, c1) = ref(x, hx)
            o2, (h2, c2) = ours(x.numpy(), None if hx is None else (h0.numpy(), c0.numpy()))
            for a, b in ((o1, o2), (h1, h2), (c1, c2)):
                _close(a, b, TOL[dtype])
        # h0 alone, c0 alone: the other is zero.
        zh, zc = torch.zeros_like(h0), torch.zeros_like(c0)
        _close(ref(x, (h0, zc))[1][1], ours(x.numpy(), (h0.numpy(), None))[1][1], TOL[dtype])
        _close(ref(x, (zh, c0))[0], ours(x.numpy(), (None, c0.numpy()))[0], TOL[dtype])
        # Unbatched input.
        xu = x[0] if kwargs.get("batch_first") else x[:, 0]
        o1, (h1, c1) = ref(xu)
        o2, (h2, c2) = ours(xu.numpy())
        _close(o1, o2, TOL[dtype])
        _close(c1, c2, TOL[dtype])
        # Torch tensors in, torch tensors out.
        o3, (h3, _) = ours(x)
        assert isinstance(o3, torch.Tensor) and isinstance(h3, torch.Tensor)


def test_numpy_lstm_lengths_and_gradients_match_autograd():
    torch.manual_seed(1)
    dt = torch.float64
    ref = torch.nn.LSTM(3, 5, num_layers=2, bidirectional=True, proj_size=2, dtype=dt)
    ours = grux.LSTM(3, 5, num_layers=2, bidirectional=True, proj_size=2, dtype="float64")
    ours.load_state_dict(_np_state(ref))
    lengths = np.array([4, 7, 1, 6], dtype=np.int64)
    x = torch.randn(7, 4, 3, dtype=dt, requires_grad=True)
    h0 = torch.randn(4, 4, 2, dtype=dt, requires_grad=True)
    c0 = torch.randn(4, 4, 5, dtype=dt, requires_grad=True)
    packed = torch.nn.utils.rnn.pack_padded_sequence(x, torch.from_numpy(lengths),
                                                     enforce_sorted=False)
    po, (h_n, c_n) = ref(packed, (h0, c0))
    out, _ = torch.nn.utils.rnn.pad_packed_sequence(po, total_length=7)
    dy, dh, dc = torch.randn_like(out), torch.randn_like(h_n), torch.randn_like(c_n)
    mask = (torch.arange(7)[:, None] < torch.from_numpy(lengths)[None, :]).to(dt)[..., None]
    ((out * dy * mask).sum() + (h_n * dh).sum() + (c_n * dc).sum()).backward()

    o2, (h2, c2), tape = ours.forward_train(x.detach().numpy(),
                                            (h0.detach().numpy(), c0.detach().numpy()), lengths)
    _close(out, o2, 1e-12)
    _close(h_n, h2, 1e-12)
    _close(c_n, c2, 1e-12)
    g = ours.backward(tape, dy.numpy() * mask.numpy(), dh.numpy(), dc.numpy())
    _close(x.grad, g["input"], 1e-10)
    _close(h0.grad, g["h0"], 1e-10)
    _close(c0.grad, g["c0"], 1e-10)
    for k, p in ref.named_parameters():
        _close(p.grad, g[k], 1e-10)
    # From c_n alone.
    _, _, tape = ours.forward_train(x.detach().numpy())
    g = ours.backward(tape, grad_c_n=np.ones((4, 4, 5)))
    assert g["input"].shape == (7, 4, 3) and np.abs(g["input"]).max() > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_numpy_lstm_cell_matches_nn_lstm_cell(dtype):
    torch.manual_seed(2)
    ref = torch.nn.LSTMCell(3, 7, dtype=dtype)
    ours = grux.LSTMCell(3, 7, dtype=dtype)
    ours.load_state_dict(_np_state(ref))
    x = torch.randn(4, 3, dtype=dtype, requires_grad=True)
    h = torch.randn(4, 7, dtype=dtype, requires_grad=True)
    c = torch.randn(4, 7, dtype=dtype, requires_grad=True)
    h1, c1 = ref(x, (h, c))
    h2, c2 = ours(x.detach().numpy(), (h.detach().numpy(), c.detach().numpy()))
    _close(h1, h2, TOL[dtype])
    _close(c1, c2, TOL[dtype])
    dh, dc = torch.randn_like(h1), torch.randn_like(c1)
    ((h1 * dh).sum() + (c1 * dc).sum()).backward()
    g = ours.backward(x.detach().numpy(), (h.detach().numpy(), c.detach().numpy()), dh.numpy(),
                      dc.numpy())
    tol = 10 * TOL[dtype]
    _close(x.grad, g["input"], tol)
    _close(h.grad, g["hx"], tol)
    _close(c.grad, g["cx"], tol)
    for k, p in ref.named_parameters():
        _close(p.grad, g[k], tol)
    # Unbatched, no state.
    _close(ref(x[0].detach())[0], ours(x[0].detach().numpy())[0], TOL[dtype])
    # A cell without biases refuses a state dict with them, naming why.
    with pytest.raises(grux.Error, match="biases"):
        grux.LSTMCell(3, 7, bias=False).load_state_dict(_np_state(ref))


@pytest.mark.parametrize("batch,dtype,proj", [(0, "float32", 0), (1, "float32", 0),
                                              (3, "float32", 0), (1, "float64", 0),
                                              (2, "float32", 2)])
def test_lstm_stream_any_split_equals_the_whole_sequence(batch, dtype, proj):
    lstm = grux.LSTM(2, 9, num_layers=2, proj_size=proj, dtype=dtype, seed=3)
    rng = np.random.default_rng(4)
    shape = (40, 2) if batch == 0 else (40, batch, 2)
    x = rng.uniform(-1, 1, shape).astype(dtype)
    whole, (h_n, c_n) = lstm(x)
    stream = grux.LSTMStream(lstm, batch)
    pieces = [stream.step(x[0]), stream.process(x[1:8]), stream.step(x[8])]
    pieces += [stream.process(x[t:t + 5]) for t in range(9, 40, 5)]
    got = np.concatenate([p[None] if p.ndim == x.ndim - 1 else p for p in pieces])
    # The real-time kernel (one sequence, f32, no projection) is within f32 rounding of the
    # engine; every other stream runs the engine's kernels and gives its bits.
    realtime = batch <= 1 and dtype == "float32" and proj == 0
    if realtime:
        _close(got, whole, 1e-5)
    else:
        assert np.array_equal(got, whole)
    _close(stream.state(), h_n, 1e-5)
    _close(stream.cell_state(), c_n, 1e-5)
    # Split differently from a reset: the same bits as the first pass.
    stream.reset()
    again = np.concatenate([stream.process(x[t:t + 3]) for t in range(0, 40, 3)])
    assert np.array_equal(again, got)
    # out= writes into the given array.
    stream.reset()
    out = np.empty_like(whole[:1])
    assert stream.process(x[:1], out=out) is out and np.array_equal(out, got[:1])


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_lstm_precision_and_a_stream_of_two_threads(precision):
    lstm = grux.LSTM(3, 40, num_layers=2, seed=8)
    x = np.random.default_rng(9).uniform(-1, 1, (25, 2, 3)).astype(np.float32)
    f32, _ = lstm(x)
    low, (h_n, c_n) = lstm(x, precision=precision)
    err = np.abs(low - f32).max()
    assert 1e-6 < err < (2e-2 if precision == "bf16" else 5e-2), err
    stream = grux.LSTMStream(lstm, 2, precision=precision, threads=2)
    got = np.concatenate([stream.process(x[:4]), stream.process(x[4:])])
    assert np.array_equal(got, low)
    two = grux.LSTMStream(lstm, 2, threads=2)  # f32 on a team: LSTM's bits
    assert np.array_equal(np.concatenate([two.step(x[t])[None] for t in range(25)]), f32)
    if precision == "bf16":  # bf16 training: every gradient near f32's, not equal
        dy = np.random.default_rng(5).standard_normal(f32.shape).astype(np.float32)
        grads = {}
        for p in ("f32", "bf16"):
            _, _, tape = lstm.forward_train(x, precision=p)
            grads[p] = lstm.backward(tape, dy)
        for k, g in grads["f32"].items():
            scale = np.abs(g).max()
            assert 0 < np.abs(grads["bf16"][k] - g).max() <= 3e-2 * scale, k
    else:
        with pytest.raises(grux.Error, match="int8 is for inference"):
            lstm.forward_train(x, precision="int8")


def test_lstm_stream_from_a_state_and_torch_frames():
    lstm = grux.LSTM(1, 8, seed=5)
    h0 = np.full((1, 1, 8), 0.5, np.float32)
    c0 = np.full((1, 1, 8), -0.25, np.float32)
    x = np.random.default_rng(6).uniform(-1, 1, (20, 1, 1)).astype(np.float32)
    whole, _ = lstm(x, (h0, c0))
    stream = grux.LSTMStream(lstm, 1, (h0, c0))
    got = np.stack([stream.step(torch.from_numpy(x[t])).numpy() for t in range(20)])
    _close(got, whole, 1e-5)
    stream.reset((h0, c0))
    _close(stream.process(x), whole, 1e-5)


def test_numpy_lstm_errors():
    torch.manual_seed(7)
    gru_state = {k: v.numpy() for k, v in torch.nn.GRU(2, 4).state_dict().items()}
    with pytest.raises(grux.Error, match="weight_hh_l0"):
        grux.LSTM(2, 4).load_state_dict(gru_state)
    lstm_state = _np_state(torch.nn.LSTM(2, 4, proj_size=2))
    with pytest.raises(grux.Error, match="proj_size"):
        grux.LSTM(2, 4).load_state_dict(lstm_state)
    with pytest.raises(grux.Error, match="proj_size"):
        grux.LSTM(2, 4, proj_size=4)
    lstm = grux.LSTM(2, 4)
    with pytest.raises(grux.Error, match="input"):
        lstm(np.zeros((3, 1, 5), np.float32))
    with pytest.raises(grux.Error, match="hx"):
        lstm(np.zeros((3, 1, 2), np.float32), np.zeros((1, 1, 4), np.float32))
    _, _, gru_tape = grux.GRU(2, 4).forward_train(np.zeros((3, 1, 2), np.float32))
    with pytest.raises(grux.Error, match="tape"):
        lstm.backward(gru_tape, np.zeros((3, 1, 4), np.float32))
    with pytest.raises(grux.Error, match="lstm"):
        grux.LSTMStream(grux.GRU(2, 4))
    with pytest.raises(grux.Error, match="threads"):
        grux.LSTMStream(lstm, 1, threads=-1)
    with pytest.raises(grux.Error, match="takes an f32 LSTM"):
        grux.LSTM(2, 4, dtype="float64")(np.zeros((3, 1, 2)), precision="bf16")
    stream = grux.LSTMStream(lstm, 1)
    with pytest.raises(grux.Error, match="frame"):
        stream.step(np.zeros((1, 3), np.float32))
    with pytest.raises(grux.Error, match="cell state"):
        grux.GRUStream(grux.GRU(2, 4))._core.cell_state()


# ---- grux.torch ----------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [dict(), dict(num_layers=2, bidirectional=True),
                                    dict(num_layers=2, proj_size=3, batch_first=True, bias=False)])
def test_torch_lstm_same_parameters_and_initial_values(kwargs):
    torch.manual_seed(0)
    ref = torch.nn.LSTM(4, 6, **kwargs)
    torch.manual_seed(0)
    ours = gt.LSTM(4, 6, **kwargs)
    a, b = ref.state_dict(), ours.state_dict()
    assert list(a) == list(b)
    for k in a:
        assert a[k].shape == b[k].shape and torch.equal(a[k], b[k]), k
    torch.manual_seed(1)
    other = torch.nn.LSTM(4, 6, **kwargs)
    ours.load_state_dict(other.state_dict())
    ref.load_state_dict(ours.state_dict())
    assert all(torch.equal(p, q) for p, q in zip(ref.parameters(), other.parameters()))
    assert repr(ours) == repr(ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_torch_lstm_forward_and_packed_sequence(dtype):
    torch.manual_seed(2)
    ref = torch.nn.LSTM(3, 5, num_layers=2, bidirectional=True, proj_size=2, dtype=dtype)
    ours = gt.LSTM(3, 5, num_layers=2, bidirectional=True, proj_size=2, dtype=dtype)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(7, 4, 3, dtype=dtype)
    hx = (torch.randn(4, 4, 2, dtype=dtype), torch.randn(4, 4, 5, dtype=dtype))
    for args in [(x,), (x, hx), (x[:, 0],), (x[:, 0], (hx[0][:, 0], hx[1][:, 0]))]:
        (o1, (h1, c1)), (o2, (h2, c2)) = ref(*args), ours(*args)
        for a, b in ((o1, o2), (h1, h2), (c1, c2)):
            _close(a, b, TOL[dtype])
    seqs = [torch.randn(n, 3, dtype=dtype) for n in (4, 7, 2, 7, 5)]
    hx5 = (torch.randn(4, 5, 2, dtype=dtype), torch.randn(4, 5, 5, dtype=dtype))
    for enforce_sorted, s in ((False, seqs), (True, sorted(seqs, key=len, reverse=True))):
        p = pack_sequence(s, enforce_sorted=enforce_sorted)
        (o1, (h1, c1)), (o2, (h2, c2)) = ref(p, hx5), ours(p, hx5)
        assert torch.equal(o1.batch_sizes, o2.batch_sizes)
        for a, b in ((o1.data, o2.data), (h1, h2), (c1, c2)):
            _close(a, b, TOL[dtype])


def test_torch_lstm_gradcheck_f64():
    torch.manual_seed(3)
    m = gt.LSTM(2, 3, num_layers=2, bidirectional=True, proj_size=2, dtype=torch.float64)
    x = torch.randn(4, 2, 2, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(4, 2, 2, dtype=torch.float64, requires_grad=True)
    c0 = torch.randn(4, 2, 3, dtype=torch.float64, requires_grad=True)

    def f(x, h0, c0, *weights):
        for n, w in zip(m._flat_weights_names, weights):
            m._parameters[n] = w
        out, (h_n, c_n) = m(x, (h0, c0))
        return out, h_n, c_n

    weights = [p.detach().clone().requires_grad_() for p in m.parameters()]
    assert torch.autograd.gradcheck(f, (x, h0, c0, *weights), eps=1e-6, atol=1e-7)


def test_torch_lstm_training_loop_same_losses():
    torch.manual_seed(4)
    ref = torch.nn.LSTM(3, 8, num_layers=2, batch_first=True)
    ours = gt.LSTM(3, 8, num_layers=2, batch_first=True)
    ours.load_state_dict(ref.state_dict())
    x, y = torch.randn(4, 10, 3), torch.randn(4, 10, 8)
    losses = []
    for m in (ref, ours):
        opt = torch.optim.Adam(m.parameters(), lr=1e-2)
        run = []
        for _ in range(15):
            opt.zero_grad()
            loss = ((m(x)[0] - y) ** 2).mean()
            loss.backward()
            opt.step()
            run.append(loss.item())
        losses.append(run)
    assert np.allclose(losses[0], losses[1], rtol=1e-4, atol=1e-6), losses


@pytest.mark.parametrize("bias", [True, False])
def test_torch_lstm_cell(bias):
    torch.manual_seed(5)
    ref = torch.nn.LSTMCell(3, 6, bias=bias, dtype=torch.float64)
    torch.manual_seed(5)
    ours = gt.LSTMCell(3, 6, bias=bias, dtype=torch.float64)
    assert list(ref.state_dict()) == list(ours.state_dict()) and repr(ref) == repr(ours)
    for k, v in ref.state_dict().items():
        assert torch.equal(v, ours.state_dict()[k])
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    h = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    c = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    for args in [(x,), (x, (h, c)), (x[0],)]:
        (h1, c1), (h2, c2) = ref(*args), ours(*args)
        _close(h1, h2, 1e-12)
        _close(c1, c2, 1e-12)
    assert torch.autograd.gradcheck(lambda x, h, c: ours(x, (h, c)), (x, h, c), eps=1e-6,
                                    atol=1e-7)
    # A step, an optimizer update, a step: the second sees the new weights (repacked).
    opt = torch.optim.SGD(ours.parameters(), lr=0.5)
    before = ours(x)[0].detach()
    ours(x)[0].sum().backward()
    opt.step()
    with torch.no_grad():
        ref.load_state_dict(ours.state_dict())
        _close(ours(x)[0], ref(x)[0], 1e-12)
        assert not torch.equal(ours(x)[0], before)
    copy.deepcopy(ours)  # the packed copy is not carried


def test_torch_lstm_cell_fast_path():
    """Without autograd, a batch-1 or unbatched f32 step on torch tensors, hx None or a tuple,
    goes through one C call (_grux._cell_forward), with the same bits as the general path;
    anything else (a batch, other dtypes, NumPy, a list, wrong shapes, changed weights) gets
    None from it and takes the general path."""
    from grux import _grux
    if not _grux._torch_access():
        pytest.skip("grux._torch_access is not in use here")
    torch.manual_seed(29)
    cell = gt.LSTMCell(6, 40)
    x, h, c = torch.randn(1, 6), torch.randn(1, 40), torch.randn(1, 40)
    with torch.no_grad():
        cell(x, (h, c))
        fast = cell._fast
        assert fast is not None
        general = cell._packed[4]  # the packed grux.LstmCell (_packed_cell's tuple)
        for a, hx in [(x, (h, c)), (x, None), (x[0], (h[0], c[0])), (x[0], None)]:
            got = _grux._cell_forward(fast, cell._parameters, a, hx)
            assert type(got) is tuple and len(got) == 2
            want = general.forward(a.numpy(), *(hx if hx else (None, None)))
            for g, w in zip(got, want):
                assert type(g) is torch.Tensor and g.shape == a.shape[:-1] + (40,)
                assert torch.equal(g, torch.from_numpy(w))
            for g, w in zip(cell(a, hx), got):
                assert torch.equal(g, w)
        for a, hx in [(torch.randn(2, 6), None),                       # a batch
                      (x.double(), (h.double(), c.double())),          # another dtype
                      (x.numpy(), None),                               # NumPy
                      (x, [h, c]),                                     # a list
                      (x, (h, c[0])), (x, (h, torch.randn(1, 41))), (x, h),  # shapes
                      (x[:, :5], None)]:
            assert _grux._cell_forward(fast, cell._parameters, a, hx) is None
        with pytest.raises(grux.Error, match="hx"):
            cell(x, h)
        # Changed weights: None, and the next call repacks (a new handle).
        cell.weight_hh.mul_(0.5)
        assert _grux._cell_forward(fast, cell._parameters, x, (h, c)) is None
        want = torch.nn.LSTMCell(6, 40)
        want.load_state_dict(cell.state_dict())
        for g, w in zip(cell(x, (h, c)), want(x, (h, c))):
            assert (g - w).abs().max() < 3e-6
        assert cell._fast is not None and cell._fast is not fast
    # With autograd on, the general path (a graph to backpropagate through).
    x.requires_grad_(True)
    assert cell(x, (h, c))[0].grad_fn is not None


def test_torch_lstm_errors():
    with pytest.raises(grux.Error, match="proj_size"):
        gt.LSTM(2, 4, proj_size=4)
    with pytest.raises(grux.Error, match="dropout"):
        gt.LSTM(2, 4, dropout=2.0)
    m = gt.LSTM(2, 4)
    with pytest.raises(grux.Error, match="hx"):
        m(torch.zeros(3, 1, 2), torch.zeros(1, 1, 4))
    with pytest.raises(grux.Error, match="dtype"):
        m(torch.zeros(3, 1, 2), (torch.zeros(1, 1, 4, dtype=torch.float64), torch.zeros(1, 1, 4)))
