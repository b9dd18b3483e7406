"""grux.torch.GRU / GRUCell as drop-in torch.nn.GRU / nn.GRUCell: the same parameters and
initial values, the same outputs (PackedSequence included), gradcheck in f64, and the same
losses through 20 steps of an ordinary Adam training loop."""
import copy
import functools
import sys

import numpy as np
import pytest
import torch
from torch.nn.utils.rnn import pack_sequence

import grux
import grux.torch as gt
from grux import _grux


@pytest.mark.parametrize("kwargs", [dict(), dict(num_layers=2, bidirectional=True),
                                    dict(num_layers=3, batch_first=True, bias=False)])
def test_same_parameters_and_initial_values(kwargs):
    torch.manual_seed(0)
    ref = torch.nn.GRU(4, 6, **kwargs)
    torch.manual_seed(0)
    ours = gt.GRU(4, 6, **kwargs)
    a, b = ref.state_dict(), ours.state_dict()
    assert list(a) == list(b)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    # load_state_dict both ways.
    torch.manual_seed(1)
    other = torch.nn.GRU(4, 6, **kwargs)
    ours.load_state_dict(other.state_dict())
    ref.load_state_dict(ours.state_dict())
    assert all(torch.equal(p, q) for p, q in zip(ref.parameters(), other.parameters()))
    assert "reset_before" not in repr(ours) and repr(ours).startswith("GRU(4, 6")


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-5), (torch.float64, 1e-12)])
def test_forward_matches_nn_gru(dtype, tol):
    torch.manual_seed(2)
    ref = torch.nn.GRU(3, 5, num_layers=2, bidirectional=True, dtype=dtype)
    ours = gt.GRU(3, 5, num_layers=2, bidirectional=True, dtype=dtype)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(7, 4, 3, dtype=dtype)
    h0 = torch.randn(4, 4, 5, dtype=dtype)
    for args in [(x,), (x, h0), (x[:, 0],), (x[:, 0], h0[:, 0])]:
        (o1, h1), (o2, h2) = ref(*args), ours(*args)
        assert o1.shape == o2.shape and h1.shape == h2.shape
        assert (o1 - o2).abs().max() < tol and (h1 - h2).abs().max() < tol
    with torch.no_grad():  # the inference path
        assert (ref(x)[0] - ours(x)[0]).abs().max() < tol


def test_packed_sequence():
    torch.manual_seed(3)
    ref = torch.nn.GRU(3, 5, num_layers=2, bidirectional=True, dtype=torch.float64)
    ours = gt.GRU(3, 5, num_layers=2, bidirectional=True, dtype=torch.float64)
    ours.load_state_dict(ref.state_dict())
    seqs = [torch.randn(n, 3, dtype=torch.float64, requires_grad=True) for n in (4, 7, 2, 7, 5)]
    h0 = torch.randn(4, 5, 5, dtype=torch.float64)
    for enforce_sorted, s in ((False, seqs), (True, sorted(seqs, key=len, reverse=True))):
        packed = pack_sequence(s, enforce_sorted=enforce_sorted)
        (p1, h1), (p2, h2) = ref(packed, h0), ours(packed, h0)
        assert isinstance(p2, torch.nn.utils.rnn.PackedSequence)
        assert torch.equal(p1.batch_sizes, p2.batch_sizes)
        assert (p1.data - p2.data).abs().max() < 1e-12 and (h1 - h2).abs().max() < 1e-12
        g1 = torch.autograd.grad(p1.data.sum() + h1.sum(), s, retain_graph=True)
        g2 = torch.autograd.grad(p2.data.sum() + h2.sum(), s)
        assert max((a - b).abs().max() for a, b in zip(g1, g2)) < 1e-12


def test_gradcheck_f64():
    torch.manual_seed(4)
    gru = gt.GRU(3, 4, num_layers=2, bidirectional=True, dtype=torch.float64)
    x = torch.randn(5, 2, 3, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(4, 2, 4, dtype=torch.float64, requires_grad=True)
    params = list(gru.parameters())

    def f(x, h0, *ws):
        with torch.no_grad():
            for p, w in zip(params, ws):
                p.copy_(w)
        out, h_n = gru(x, h0)
        return out, h_n

    # gradcheck differentiates with respect to x and h0 through grux's backward; the weights'
    # gradients are checked against nn.GRU's below and in test_training_loop_same_losses.
    assert torch.autograd.gradcheck(lambda x, h0: gru(x, h0), (x, h0))
    cell = gt.GRUCell(3, 4, dtype=torch.float64)

    def packed(w):  # gradcheck perturbs w in place without bumping its version: repack
        cell.reset_packed_weights()
        return cell._cell(w)

    assert torch.autograd.gradcheck(
        lambda x, h, *w: gt._CellFunction.apply(packed(w), x, h, *w),
        (torch.randn(2, 3, dtype=torch.float64, requires_grad=True),
         torch.randn(2, 4, dtype=torch.float64, requires_grad=True),
         *[p.detach().clone().requires_grad_() for p in cell.parameters()]))


def test_weight_gradients_gradcheck_f64():
    torch.manual_seed(5)
    gru = gt.GRU(2, 3, num_layers=2, dtype=torch.float64)
    names = gru._flat_weights_names
    x = torch.randn(4, 2, 2, dtype=torch.float64)
    ws = [getattr(gru, n).detach().clone().requires_grad_() for n in names]
    spec = (names, False, 0.0, False, None, 0)
    assert torch.autograd.gradcheck(lambda *w: gt._GruFunction.apply(spec, x, None, *w), ws)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_training_loop_same_losses(dtype, tol):
    """Swapping nn.GRU for grux.torch.GRU in a training loop changes nothing but the speed."""

    class Model(torch.nn.Module):
        def __init__(self, rnn):
            super().__init__()
            self.rnn = rnn(6, 16, num_layers=2, dtype=dtype)
            self.fc = torch.nn.Linear(16, 3, dtype=dtype)

        def forward(self, x):
            out, h = self.rnn(x)
            return self.fc(out), h

    torch.manual_seed(6)
    ref = Model(torch.nn.GRU)
    torch.manual_seed(6)
    ours = Model(gt.GRU)
    data = [(torch.randn(12, 8, 6, dtype=dtype), torch.randn(12, 8, 3, dtype=dtype))
            for _ in range(5)]
    losses = []
    for model in (ref, ours):
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        run = []
        for step in range(20):
            x, y = data[step % len(data)]
            opt.zero_grad()
            pred, h = model(x)
            loss = torch.nn.functional.mse_loss(pred, y) + 0.1 * h.pow(2).mean()
            loss.backward()
            opt.step()
            run.append(loss.item())
        losses.append(run)
    for step, (a, b) in enumerate(zip(*losses)):
        assert abs(a - b) <= tol, f"step {step}: nn.GRU {a}, grux {b}"
    assert losses[1][15] < losses[1][0]  # the same batch, 15 steps later


def test_grucell_module():
    torch.manual_seed(7)
    ref = torch.nn.GRUCell(3, 5)
    torch.manual_seed(7)
    ours = gt.GRUCell(3, 5)
    assert all(torch.equal(a, b) for a, b in zip(ref.parameters(), ours.parameters()))
    x, h = torch.randn(4, 3), torch.randn(4, 5)
    assert (ref(x, h) - ours(x, h)).abs().max() < 2e-6
    assert (ref(x[0]) - ours(x[0])).abs().max() < 2e-6
    # After an optimizer step the cell computes with the new weights.
    opt = torch.optim.SGD(ours.parameters(), lr=0.5)
    ours(x, h).sum().backward()
    opt.step()
    with torch.no_grad():
        ref.load_state_dict(ours.state_dict())
    assert (ref(x, h) - ours(x, h)).abs().max() < 2e-6
    copy.deepcopy(ours)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gru_cell_inference_path(dtype):
    """Without autograd the cell reads tensors in place and returns tensors: batch 1 (the
    real-time kernel in f32), a batch, unbatched, hx given or not."""
    torch.manual_seed(22)
    ref = torch.nn.GRUCell(6, 7, dtype=dtype)
    ours = gt.GRUCell(6, 7, dtype=dtype)
    ours.load_state_dict(ref.state_dict())
    tol = 3e-6 if dtype == torch.float32 else 1e-12
    with torch.no_grad():
        for x, h in [(torch.randn(1, 6, dtype=dtype), torch.randn(1, 7, dtype=dtype)),
                     (torch.randn(4, 6, dtype=dtype), None),
                     (torch.randn(6, dtype=dtype), torch.randn(7, dtype=dtype))]:
            got = ours(x, h)
            assert type(got) is torch.Tensor and got.dtype == dtype
            assert (got - ref(x, h)).abs().max() < tol
        with pytest.raises(grux.Error, match="input: expected a torch.Tensor, got ndarray"):
            ours(np.zeros((1, 6)))
        with pytest.raises(grux.Error, match="hx"):
            ours(torch.randn(1, 6, dtype=dtype), torch.randn(1, 7, dtype=torch.float16))


def test_gru_cell_fast_path():
    """Without autograd, a batch-1 or unbatched f32 step on torch tensors goes through one C
    call (_grux._cell_forward), with the same bits as the general path; anything else (a
    batch, other dtypes or layouts, NumPy, changed weights) gets None from it and takes the
    general path, whose errors name the argument."""
    if not grux._grux._torch_access():
        pytest.skip("grux._torch_access is not in use here")
    torch.manual_seed(23)
    cell = gt.GRUCell(6, 40)
    x, h = torch.randn(1, 6), torch.randn(1, 40)
    with torch.no_grad():
        cell(x, h)
        fast = cell._fast
        assert fast is not None
        general = cell._cell(cell._weights())
        for a, b in [(x, h), (x, None), (x[0], h[0]), (x[0], None)]:
            got = _grux._cell_forward(fast, cell._parameters, a, b)
            assert type(got) is torch.Tensor and got.shape == (a.shape[:-1] + (40,))
            assert torch.equal(got, general.forward(a, b))
            assert torch.equal(cell(a, b), got)
        for a, b in [(torch.randn(2, 6), None),                  # a batch
                     (x.double(), h.double()),                    # another dtype
                     (x.numpy(), None),                           # NumPy
                     (torch.randn(6, 2)[:, 0], None),             # strided
                     (x, h[0]), (x, torch.randn(1, 41)), (x[:, :5], None)]:  # shapes
            assert _grux._cell_forward(fast, cell._parameters, a, b) is None
        with pytest.raises(grux.Error, match="hx"):
            cell(x, torch.randn(1, 41))
        # Changed weights: None, and the next call repacks (a new handle).
        cell.weight_hh.mul_(0.5)
        assert _grux._cell_forward(fast, cell._parameters, x, h) is None
        want = torch.nn.GRUCell(6, 40)
        want.load_state_dict(cell.state_dict())
        assert (cell(x, h) - want(x, h)).abs().max() < 3e-6
        assert cell._fast is not None and cell._fast is not fast
        assert _grux._cell_forward(cell._fast, {}, x, h) is None  # weights not found
    with pytest.raises(TypeError, match="takes 4 arguments"):
        _grux._cell_forward(fast, cell._parameters, x)
    with pytest.raises(ValueError):
        _grux._cell_forward(object(), cell._parameters, x, h)
    # With autograd on, the general path (a graph to backpropagate through).
    x.requires_grad_(True)
    out = cell(x, h)
    assert out.grad_fn is not None


def _forward_frames(call, cls=gt.GRUCell):
    """How many times cls.forward's Python code ran during call()."""
    code, seen = cls.forward.__code__, []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is code:
            seen.append(1)
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return len(seen)


def _called_cells(ref_cls, cls, seed):
    """(torch's cell, grux's with the same weights), 6 inputs and 40 units, for the __call__
    tests: skipped without grux._torch_access, and cls.__call__ the C method (cell_call)."""
    if not grux._grux._torch_access():
        pytest.skip("grux._torch_access is not in use here")
    assert type(cls.__call__).__name__ == "method_descriptor"
    torch.manual_seed(seed)
    ref, cell = ref_cls(6, 40), cls(6, 40)
    cell.load_state_dict(ref.state_dict())
    return ref, cell


def test_gru_cell_call():
    """grux.torch.GRUCell.__call__ is nn.Module.__call__ with an inference step in one C call:
    no Python frame of forward where nothing else would run, and nn.Module.__call__'s way
    (forward's code, the hooks, a subclass's forward) wherever something would."""
    ref, cell = _called_cells(torch.nn.GRUCell, gt.GRUCell, 24)
    x, h = torch.randn(1, 6), torch.randn(1, 40)
    with torch.no_grad():
        want = ref(x, h)
        cell(x, h)  # packs the weights
        got = []
        assert _forward_frames(lambda: got.append(cell(x, h))) == 0
        assert _forward_frames(lambda: got.append(cell(x[0]))) == 0
        assert (got[0] - want).abs().max() < 3e-6 and got[1].shape == (40,)
        # Keywords, a batch, wrong arguments: nn.Module.__call__ and forward's general path.
        assert _forward_frames(lambda: got.append(cell(input=x, hx=h))) == 1
        assert torch.equal(got[-1], got[0])
        assert _forward_frames(lambda: cell(torch.randn(3, 6))) == 1
        with pytest.raises(TypeError):
            cell()
        with pytest.raises(TypeError):
            cell(x, h, h)
        # The module's hooks and the global ones run, and change the result as they say.
        handle = cell.register_forward_hook(lambda m, args, out: out * 2)
        assert torch.equal(cell(x, h), 2 * got[0])
        handle.remove()
        handle = cell.register_forward_pre_hook(lambda m, args: (args[0] * 0, args[1]))
        assert torch.equal(cell(x, h), cell.forward(x * 0, h))
        handle.remove()
        handle = torch.nn.modules.module.register_module_forward_hook(lambda m, a, o: o + 1)
        try:
            assert torch.equal(cell(x, h), got[0] + 1)
        finally:
            handle.remove()
        assert torch.equal(cell(x, h), got[0]) and _forward_frames(lambda: cell(x, h)) == 0

        # A forward of the instance's, of a subclass or set on the class is the one called.
        cell.forward = lambda *a: "instance"
        assert cell(x, h) == "instance"
        del cell.forward

        class Sub(gt.GRUCell):
            def forward(self, input, hx=None):
                return "subclass"
        assert Sub(6, 40)(x, h) == "subclass"
        original = gt.GRUCell.forward
        gt.GRUCell.forward = lambda self, *a: "class"
        try:
            assert cell(x, h) == "class"
        finally:
            gt.GRUCell.forward = original
        assert torch.equal(cell(x, h), got[0])
        # nn.Module.__call__ replaced (torch.fx does so while tracing): the replacement runs.
        seen, original_call = [], torch.nn.Module.__call__

        def patched(module, *a, **k):
            seen.append(module)
            return original_call(module, *a, **k)
        torch.nn.Module.__call__ = patched
        try:
            assert torch.equal(cell(x, h), got[0]) and seen == [cell]
        finally:
            torch.nn.Module.__call__ = original_call
        assert _forward_frames(lambda: cell(x, h)) == 0
    # Autograd on: forward's Python code, and a graph.
    xg = x.clone().requires_grad_(True)
    out = []
    assert _forward_frames(lambda: out.append(cell(xg, h))) == 1
    assert out[0].grad_fn is not None


def test_lstm_cell_call():
    """grux.torch.LSTMCell.__call__ as GRUCell's: an inference step (hx None or a tuple) in one
    C call, nn.Module.__call__'s way (forward's code, the hooks, a subclass's forward)
    wherever something else would run."""
    ref, cell = _called_cells(torch.nn.LSTMCell, gt.LSTMCell, 25)
    x, h, c = torch.randn(1, 6), torch.randn(1, 40), torch.randn(1, 40)
    frames = functools.partial(_forward_frames, cls=gt.LSTMCell)
    with torch.no_grad():
        want = ref(x, (h, c))
        cell(x, (h, c))  # packs the weights
        got = []
        assert frames(lambda: got.append(cell(x, (h, c)))) == 0
        assert frames(lambda: got.append(cell(x[0]))) == 0
        for g, w in zip(got[0], want):
            assert (g - w).abs().max() < 3e-6
        assert got[1][0].shape == (40,) and got[1][1].shape == (40,)
        # Keywords, a list, a batch: nn.Module.__call__ and forward's general path.
        assert frames(lambda: got.append(cell(input=x, hx=(h, c)))) == 1
        assert frames(lambda: got.append(cell(x, [h, c]))) == 1
        for r in got[2:]:
            assert all(torch.equal(a, b) for a, b in zip(r, got[0]))
        assert frames(lambda: cell(torch.randn(3, 6))) == 1
        with pytest.raises(TypeError):
            cell()
        # The module's hooks and the global ones run.
        handle = cell.register_forward_hook(lambda m, args, out: (out[0] * 2, out[1]))
        assert torch.equal(cell(x, (h, c))[0], 2 * got[0][0])
        handle.remove()
        handle = torch.nn.modules.module.register_module_forward_hook(lambda m, a, o: "hooked")
        try:
            assert cell(x, (h, c)) == "hooked"
        finally:
            handle.remove()
        assert frames(lambda: cell(x, (h, c))) == 0

        # A forward of the instance's or a subclass's is the one called.
        cell.forward = lambda *a: "instance"
        assert cell(x, (h, c)) == "instance"
        del cell.forward

        class Sub(gt.LSTMCell):
            def forward(self, input, hx=None):
                return "subclass"
        assert Sub(6, 40)(x, (h, c)) == "subclass"
        assert torch.equal(cell(x, (h, c))[0], got[0][0])
    # Autograd on: forward's Python code, and a graph.
    out = []
    assert frames(lambda: out.append(cell(x.clone().requires_grad_(True), (h, c)))) == 1
    assert out[0][0].grad_fn is not None


def test_gru_cell_call_while_another_thread_repacks():
    """The C call holds the packed cell while its step runs without the GIL: another thread
    dropping the packed copy (reset_packed_weights) meanwhile changes no result."""
    if not grux._grux._torch_access():
        pytest.skip("grux._torch_access is not in use here")
    import threading
    torch.manual_seed(25)
    cell = gt.GRUCell(64, 256)  # a step long enough to release the GIL
    x, h = torch.randn(1, 64), torch.randn(1, 256)
    with torch.no_grad():
        want = cell(x, h)
    stop = threading.Event()

    def repack():
        while not stop.is_set():
            cell.reset_packed_weights()
    t = threading.Thread(target=repack)
    t.start()
    try:
        with torch.no_grad():
            for _ in range(300):
                assert torch.equal(cell(x, h), want)
    finally:
        stop.set()
        t.join()


def test_torch_errors():
    with pytest.raises(grux.Error, match="grux runs on the CPU"):
        gt.GRU(3, 4, device="meta")
    with pytest.raises(grux.Error, match="dtype"):
        gt.GRU(3, 4, dtype=torch.float16)
    gru = gt.GRU(3, 4)
    with pytest.raises(grux.Error, match="input_size 3"):
        gru(torch.randn(5, 2, 7))
    with pytest.raises(grux.Error, match="hx"):
        gru(torch.randn(5, 2, 3), torch.randn(1, 2, 4, dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("access", [True, False], ids=["libtorch", "attributes"])
def test_gru_cell_sees_every_weight_change(access, dtype):
    """The packed weights are reused between calls and repacked after any change PyTorch
    counts: an optimizer step, load_state_dict, a write under no_grad, a new Parameter;
    writes through .data after reset_packed_weights(). Checked through grux._torch_access's
    stamp and through the weights' attributes."""
    if access and not grux._grux._torch_access():
        pytest.skip("grux._torch_access is not in use here")
    grux._grux._torch_access(access)
    try:
        _check_gru_cell_sees_every_weight_change(dtype)
    finally:
        grux._grux._torch_access(True)


def _check_gru_cell_sees_every_weight_change(dtype):
    # f64 on a batch of 2 (the engine), f32 on one sequence (in f32 with grux._torch_access,
    # the fast path: _grux._cell_forward checks the weights).
    torch.manual_seed(11)
    ref = torch.nn.GRUCell(3, 5).to(dtype)
    cell = gt.GRUCell(3, 5, dtype=dtype)
    cell.load_state_dict(ref.state_dict())
    n, atol = (2, 1e-12) if dtype == torch.float64 else (1, 3e-6)
    x, h = torch.randn(n, 3, dtype=dtype), torch.randn(n, 5, dtype=dtype)

    def check():
        with torch.no_grad():
            torch.testing.assert_close(cell(x, h), ref(x, h), atol=atol, rtol=0)

    check()
    for m in (ref, cell):  # an optimizer step on the same gradients
        opt = torch.optim.SGD(m.parameters(), lr=0.5)
        m(x, h).square().sum().backward()
        opt.step()
    check()
    with torch.no_grad():
        ref.weight_hh.mul_(0.5)
        cell.weight_hh.mul_(0.5)
    check()
    ref.load_state_dict(torch.nn.GRUCell(3, 5).to(dtype).state_dict())
    cell.load_state_dict(ref.state_dict())
    check()
    new = torch.randn(15, 3, dtype=dtype)
    ref.weight_ih = torch.nn.Parameter(new.clone())
    cell.weight_ih = torch.nn.Parameter(new.clone())
    check()
    ref.bias_hh.data.add_(1.0)
    cell.bias_hh.data.add_(1.0)
    cell.reset_packed_weights()
    check()
    copy.deepcopy(cell)(x, h)  # the packed copy is not part of the module's state


def test_torch_submodule_without_importing_it():
    """`import grux; grux.torch.GRU(...)` works without `import grux.torch`, and `import grux`
    alone does not import torch (the submodule is loaded on first use)."""
    import os
    import subprocess
    code = ("import sys, grux\n"
            "print('torch' in sys.modules)\n"
            "print(type(grux.torch.GRU(3, 4)).__name__)\n"
            "try:\n"
            "    grux.no_such_name\n"
            "except AttributeError as e:\n"
            "    print('AttributeError', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=os.path.dirname(os.path.dirname(grux.__file__)))
    lines = out.stdout.splitlines()
    assert lines[0] == "False", out.stdout + out.stderr
    assert lines[1] == "GRU", out.stdout + out.stderr
    assert "no_such_name" in lines[2], out.stdout + out.stderr
