"""grux.MinGRU (NumPy) and grux.torch.MinGRU against a plain-torch implementation of the minGRU
equations written here from include/grux/mingru.h (values and autograd gradients), gradcheck,
lengths, initialisation, errors."""
import math

import numpy as np
import pytest
import torch

import grux
from gil_check import ticks_during
import grux.torch

# Tolerances: sizes here are tiny (I, H <= 7, T <= 9), so a value is a dot product of <= 7
# terms fed through <= 9 steps of a convex combination: f64 stays within ~1e-15 of the
# reference, f32 (eps 6e-8) within ~1e-6; the margins below are ~100x those.
TOL = {np.float32: 2e-5, np.float64: 1e-12}


def torch_dtype(dtype):
    return torch.float32 if dtype == np.float32 else torch.float64


def g(v):
    """The log-space variant's candidate map: v + 0.5 for v >= 0, sigmoid(v) below."""
    return torch.where(v >= 0, v + 0.5, torch.sigmoid(v))


def reference(x, state, h0=None, log_space=False, batch_first=False, lengths=None):
    """minGRU by the header's equations, one time step at a time, in plain torch (autograd
    works through it). x (T, N, I) / (N, T, I) / (T, I); state: weight_l{k}, bias_l{k}."""
    unbatched = x.dim() == 2
    if unbatched:
        x = x.unsqueeze(1)
        h0 = None if h0 is None else h0.unsqueeze(1)
    elif batch_first:
        x = x.transpose(0, 1)
    T, N, _ = x.shape
    layers = sum(1 for k in state if k.startswith("weight_l"))
    layer_in, h_n = x, []
    for k in range(layers):
        w = state[f"weight_l{k}"]
        H = w.shape[0] // 2
        pre = layer_in @ w.T
        if f"bias_l{k}" in state:
            pre = pre + state[f"bias_l{k}"]
        z, v = torch.sigmoid(pre[..., :H]), pre[..., H:]
        cand = g(v) if log_space else v
        if h0 is None:
            h = torch.full((N, H), 0.5 if log_space else 0.0, dtype=x.dtype)
        else:
            h = g(h0[k]) if log_space else h0[k]
        outs = []
        for t in range(T):
            new = (1 - z[t]) * h + z[t] * cand[t]
            if lengths is None:
                h = new
                outs.append(new)
            else:
                live = (t < torch.as_tensor(lengths))[:, None]
                h = torch.where(live, new, h)
                outs.append(torch.where(live, new, torch.zeros_like(new)))
        layer_in = torch.stack(outs)
        h_n.append(h)
    out, h_n = layer_in, torch.stack(h_n)
    if unbatched:
        return out[:, 0], h_n[:, 0]
    return (out.transpose(0, 1) if batch_first else out), h_n


def random_state(I, H, layers, bias, dtype, seed):
    rng = np.random.default_rng(seed)
    d = {}
    for k in range(layers):
        d[f"weight_l{k}"] = rng.uniform(-0.7, 0.7, (2 * H, I if k == 0 else H)).astype(dtype)
        if bias:
            d[f"bias_l{k}"] = rng.uniform(-0.7, 0.7, 2 * H).astype(dtype)
    return d


def tdict(d):
    return {k: torch.from_numpy(v) for k, v in d.items()}


CASES = [  # layers, bias, batch_first, with_h0
    (1, True, False, False),
    (1, False, False, True),
    (2, True, False, True),
    (2, True, True, False),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("log_space", [False, True])
@pytest.mark.parametrize("layers,bias,batch_first,with_h0", CASES)
def test_forward_matches_reference(dtype, log_space, layers, bias, batch_first, with_h0):
    I, H, T, N = 5, 7, 9, 3
    state = random_state(I, H, layers, bias, dtype, 1)
    m = grux.MinGRU(I, H, num_layers=layers, bias=bias, batch_first=batch_first,
                    log_space=log_space, dtype=dtype)
    m.load_state_dict(state)
    assert m.dtype == np.dtype(dtype).name
    rng = np.random.default_rng(2)
    x = rng.standard_normal((N, T, I) if batch_first else (T, N, I)).astype(dtype)
    h0 = rng.standard_normal((layers, N, H)).astype(dtype) if with_h0 else None
    out, h_n = m(x, h0)
    assert isinstance(out, np.ndarray) and out.dtype == dtype and h_n.dtype == dtype
    r_out, r_h = reference(torch.from_numpy(x), tdict(state),
                           None if h0 is None else torch.from_numpy(h0), log_space, batch_first)
    assert out.shape == tuple(r_out.shape) and h_n.shape == (layers, N, H)
    np.testing.assert_allclose(out, r_out.numpy(), atol=TOL[dtype], rtol=0)
    np.testing.assert_allclose(h_n, r_h.numpy(), atol=TOL[dtype], rtol=0)
    if log_space:
        assert np.all(out > 0)  # the log-space variant's states are positive
    # Torch tensors in: torch tensors out, the same numbers.
    t_out, t_h = m(torch.from_numpy(x), None if h0 is None else torch.from_numpy(h0))
    assert isinstance(t_out, torch.Tensor) and isinstance(t_h, torch.Tensor)
    np.testing.assert_array_equal(t_out.numpy(), out)
    # The torch module on the same weights gives the same values (no-grad path).
    mod = grux.torch.MinGRU(I, H, num_layers=layers, bias=bias, batch_first=batch_first,
                            log_space=log_space, dtype=torch_dtype(dtype))
    mod.load_state_dict(tdict(state))
    with torch.no_grad():
        m_out, m_h = mod(torch.from_numpy(x), None if h0 is None else torch.from_numpy(h0))
    np.testing.assert_array_equal(m_out.numpy(), out)
    np.testing.assert_array_equal(m_h.numpy(), h_n)


@pytest.mark.parametrize("log_space", [False, True])
def test_unbatched_and_lengths(log_space):
    I, H, T = 4, 6, 8
    state = random_state(I, H, 2, True, np.float64, 3)
    m = grux.MinGRU(I, H, num_layers=2, log_space=log_space, dtype="float64")
    m.load_state_dict(state)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((T, 3, I))
    h0 = rng.standard_normal((2, 3, H))
    lengths = [5, 8, 2]
    out, h_n = m(x, h0, lengths=lengths)
    r_out, r_h = reference(torch.from_numpy(x), tdict(state), torch.from_numpy(h0), log_space,
                           lengths=lengths)
    np.testing.assert_allclose(out, r_out.numpy(), atol=1e-12, rtol=0)
    np.testing.assert_allclose(h_n, r_h.numpy(), atol=1e-12, rtol=0)
    assert np.all(out[5:, 0] == 0) and np.all(out[2:, 2] == 0)
    # A sequence's h_n is the state after its last valid step: the whole run cut at length 2.
    np.testing.assert_allclose(h_n[:, 2], m(x[:2, 2:3], h0[:, 2:3])[1][:, 0], atol=1e-12)
    # Unbatched (T, I) with h0 (L, H).
    u_out, u_h = m(x[:, 1], h0[:, 1])
    assert u_out.shape == (T, H) and u_h.shape == (2, H)
    np.testing.assert_allclose(u_out, out[:, 1], atol=1e-12, rtol=0)
    r_out, r_h = reference(torch.from_numpy(x[:, 1]), tdict(state), torch.from_numpy(h0[:, 1]),
                           log_space)
    np.testing.assert_allclose(u_out, r_out.numpy(), atol=1e-12, rtol=0)
    np.testing.assert_allclose(u_h, r_h.numpy(), atol=1e-12, rtol=0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("log_space", [False, True])
@pytest.mark.parametrize("with_h0,batch_first,lengths", [(True, False, None), (False, True, None),
                                                         (True, False, [6, 3])])
def test_numpy_backward_matches_autograd(dtype, log_space, with_h0, batch_first, lengths):
    I, H, T, N, L = 3, 5, 6, 2, 2
    state = random_state(I, H, L, True, dtype, 5)
    m = grux.MinGRU(I, H, num_layers=L, batch_first=batch_first, log_space=log_space, dtype=dtype)
    m.load_state_dict(state)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((N, T, I) if batch_first else (T, N, I)).astype(dtype)
    h0 = rng.standard_normal((L, N, H)).astype(dtype)
    gout = rng.standard_normal((N, T, H) if batch_first else (T, N, H)).astype(dtype)
    gh = rng.standard_normal((L, N, H)).astype(dtype)
    out, h_n, tape = m.forward_train(x, h0 if with_h0 else None, lengths=lengths)
    grads = m.backward(tape, gout, gh)
    # The reference: autograd through the step-by-step equations. Without h0 the gradient is
    # taken at the default raw h0 (zeros: h_{-1} = 0, or g(0) = 0.5 in log space).
    tx = torch.from_numpy(x).requires_grad_()
    th = torch.from_numpy(h0 if with_h0 else np.zeros_like(h0)).requires_grad_()
    tw = {k: v.clone().requires_grad_() for k, v in tdict(state).items()}
    r_out, r_h = reference(tx, tw, th, log_space, batch_first, lengths)
    np.testing.assert_allclose(out, r_out.detach().numpy(), atol=TOL[dtype], rtol=0)
    ((r_out * torch.from_numpy(gout)).sum() + (r_h * torch.from_numpy(gh)).sum()).backward()
    assert sorted(grads) == sorted(["input", "h0", *state])
    tol = TOL[dtype] * 5  # gradients sum over T and the batch as well
    np.testing.assert_allclose(grads["input"], tx.grad.numpy(), atol=tol, rtol=0)
    np.testing.assert_allclose(grads["h0"], th.grad.numpy(), atol=tol, rtol=0)
    for k, p in tw.items():
        np.testing.assert_allclose(grads[k], p.grad.numpy(), atol=tol, rtol=0, err_msg=k)
    # Only grad_output, or only grad_h_n.
    g_out = m.backward(tape, grad_output=gout)
    g_h = m.backward(tape, grad_h_n=gh)
    np.testing.assert_allclose(g_out["input"] + g_h["input"], grads["input"], atol=tol, rtol=0)


@pytest.mark.parametrize("log_space", [False, True])
@pytest.mark.parametrize("batch_first,with_h0,unbatched", [(False, True, False), (True, False, False),
                                                           (False, True, True)])
def test_torch_module_gradients_match_reference(log_space, batch_first, with_h0, unbatched):
    torch.manual_seed(7)
    I, H, T, N, L = 4, 5, 6, 3, 2
    mod = grux.torch.MinGRU(I, H, num_layers=L, batch_first=batch_first, log_space=log_space,
                            dtype=torch.float64)
    shape = (T, I) if unbatched else ((N, T, I) if batch_first else (T, N, I))
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    h0 = (torch.randn((L, H) if unbatched else (L, N, H), dtype=torch.float64,
                      requires_grad=True) if with_h0 else None)
    out, h_n = mod(x, h0)
    gout, gh = torch.randn_like(out), torch.randn_like(h_n)
    ((out * gout).sum() + (h_n * gh).sum()).backward()
    # The reference on clones of the same parameters.
    rx = x.detach().clone().requires_grad_()
    rh = None if h0 is None else h0.detach().clone().requires_grad_()
    rw = {k: p.detach().clone().requires_grad_() for k, p in mod.named_parameters()}
    r_out, r_h = reference(rx, rw, rh, log_space, batch_first)
    np.testing.assert_allclose(out.detach().numpy(), r_out.detach().numpy(), atol=1e-12, rtol=0)
    np.testing.assert_allclose(h_n.detach().numpy(), r_h.detach().numpy(), atol=1e-12, rtol=0)
    ((r_out * gout).sum() + (r_h * gh).sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), rx.grad.numpy(), atol=1e-12, rtol=0)
    if with_h0:
        np.testing.assert_allclose(h0.grad.numpy(), rh.grad.numpy(), atol=1e-12, rtol=0)
    for k, p in mod.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), rw[k].grad.numpy(), atol=1e-12, rtol=0,
                                   err_msg=k)


@pytest.mark.parametrize("log_space", [False, True])
def test_torch_module_gradcheck(log_space):
    torch.manual_seed(8)
    mod = grux.torch.MinGRU(3, 4, num_layers=2, log_space=log_space, dtype=torch.float64)
    names = [k for k, _ in mod.named_parameters()]
    x = torch.randn(5, 2, 3, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(2, 2, 4, dtype=torch.float64, requires_grad=True)
    params = [p.detach().clone().requires_grad_() for p in mod.parameters()]

    def f(x, h0, *ps):
        return torch.nn.utils.stateless.functional_call(mod, dict(zip(names, ps)), (x, h0))

    # Finite differences (eps 1e-6) against grux's backward, every input and parameter. The
    # log-space map g has a kink at 0; with these random values no pre-activation is within
    # eps of it.
    assert torch.autograd.gradcheck(f, (x, h0, *params), eps=1e-6, atol=1e-7, rtol=1e-6)


def test_torch_module_lengths_and_no_grad_path():
    torch.manual_seed(9)
    mod = grux.torch.MinGRU(3, 4, dtype=torch.float64)
    x = torch.randn(6, 2, 3, dtype=torch.float64)
    out, h_n = mod(x, lengths=torch.tensor([4, 6]))
    r_out, r_h = reference(x, dict(mod.named_parameters()), None, lengths=[4, 6])
    np.testing.assert_allclose(out.detach().numpy(), r_out.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(h_n.detach().numpy(), r_h.detach().numpy(), atol=1e-12)
    assert out.requires_grad  # the parameters require grad: the autograd path ran
    with torch.no_grad():
        n_out, n_h = mod(x, lengths=[4, 6])
    assert not n_out.requires_grad
    torch.testing.assert_close(n_out, out.detach(), atol=0, rtol=0)
    torch.testing.assert_close(n_h, h_n.detach(), atol=0, rtol=0)


def test_torch_module_parameters_and_init():
    torch.manual_seed(10)
    a = grux.torch.MinGRU(6, 8, num_layers=3)
    torch.manual_seed(10)
    b = grux.torch.MinGRU(6, 8, num_layers=3)
    np_keys = sorted(grux.MinGRU(6, 8, num_layers=3).state_dict())
    assert sorted(k for k, _ in a.named_parameters()) == np_keys
    for (k, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        torch.testing.assert_close(p, q, atol=0, rtol=0)  # deterministic under manual_seed
        bound = 1 / math.sqrt(6 if k.endswith("l0") else 8)  # nn.Linear's default bound
        assert p.dtype == torch.float32 and p.abs().max() <= bound
        assert p.abs().max() > 0.8 * bound  # drawn over the whole range
    assert a.weight_l0.shape == (16, 6) and a.weight_l1.shape == (16, 8)
    assert a.bias_l2.shape == (16,)
    assert not hasattr(grux.torch.MinGRU(2, 3, bias=False), "bias_l0")
    # A trained module's weights load into the NumPy class and give the same output.
    m = grux.MinGRU(6, 8, num_layers=3)
    m.load_state_dict(a.state_dict())
    x = torch.randn(4, 2, 6)
    with torch.no_grad():
        torch.testing.assert_close(m(x)[0], a(x)[0], atol=0, rtol=0)


def test_numpy_init_and_state_dict_views():
    m = grux.MinGRU(3, 4, num_layers=2, seed=5)
    sd = m.state_dict()
    assert sorted(sd) == ["bias_l0", "bias_l1", "weight_l0", "weight_l1"]
    assert sd["weight_l0"].shape == (8, 3) and sd["weight_l1"].shape == (8, 4)
    assert np.abs(sd["weight_l0"]).max() <= 1 / math.sqrt(3)
    assert np.abs(sd["weight_l1"]).max() <= 1 / math.sqrt(4)
    np.testing.assert_array_equal(grux.MinGRU(3, 4, num_layers=2, seed=5).state_dict()["weight_l1"],
                                  sd["weight_l1"])
    assert not np.array_equal(grux.MinGRU(3, 4, num_layers=2, seed=6).state_dict()["weight_l1"],
                              sd["weight_l1"])
    # Loading keeps the arrays: the weights are views, not copies.
    w = {k: v.copy() for k, v in sd.items()}
    m.load_state_dict(w)
    assert np.shares_memory(m.state_dict()["weight_l1"], w["weight_l1"])


def test_gil_released_while_computing():
    m = grux.MinGRU(256, 256, num_layers=2)
    x = np.random.default_rng(11).standard_normal((400, 16, 256)).astype(np.float32)
    n, alone = ticks_during(lambda: m(x, threads=1))
    assert alone > 0.02, "problem too small to observe the GIL"
    assert n >= 5, f"{n} ticks in {alone:.3f} s"


@pytest.mark.parametrize("call,message", [
    (lambda m: m(np.zeros((5, 2, 4), np.float32)), "input"),
    (lambda m: m(np.zeros((5, 2, 3), np.float16)), "dtype float16 is not supported"),
    (lambda m: m(np.zeros((5, 2, 3), np.float32), np.zeros((1, 3, 4), np.float32)), "h0"),
    (lambda m: m(np.zeros((5, 2, 3), np.float32), lengths=[6, 1]), "lengths"),
    (lambda m: m(np.zeros((5, 2, 3), np.float32), lengths=[0, 1]), "lengths"),
    (lambda m: m("not an array"), "input"),
    (lambda m: m(np.zeros((5, 2, 3), np.float64)), "f64"),
    (lambda m: m.load_state_dict({"weight_l0": np.zeros((8, 3), np.float32)}), "bias = False"),
    (lambda m: m.load_state_dict({"bias_l0": np.zeros(8, np.float32)}), "weight_l0"),
    (lambda m: m.load_state_dict({"weight_l0": np.zeros((8, 3), np.float32),
                                  "bias_l0": np.zeros(8)}), "bias_l0"),
    (lambda m: m.load_state_dict(grux.MinGRU(3, 5).state_dict()), "hidden_size"),
    (lambda m: m.load_state_dict([1, 2]), "state_dict"),
    (lambda m: m.backward("tape", np.zeros(1)), "tape"),
    (lambda m: m.backward(m.forward_train(np.zeros((2, 1, 3), np.float32))[2]), "grad_output"),
    (lambda m: grux.MinGRU(3, 0), "hidden_size"),
    (lambda m: grux.MinGRU(3, 4, dtype="int8"), "dtype"),
    (lambda m: grux.torch.MinGRU(3, 4, dtype=torch.int32), "dtype"),
    (lambda m: grux.torch.MinGRU(3, 4, device="meta"), "device"),
    (lambda m: grux.torch.MinGRU(3, 4)(torch.zeros(5, 2, 4)), "input"),
    (lambda m: grux.torch.MinGRU(3, 4)(torch.zeros(5, 2, 3), torch.zeros(1, 2, 4, dtype=torch.float64)),
     "h0"),
])
def test_errors_name_the_argument(call, message):
    m = grux.MinGRU(3, 4)
    with pytest.raises(grux.Error) as e:
        call(m)
    assert isinstance(e.value, ValueError)
    text = str(e.value)
    assert "\n" not in text and text
    assert message in text, text


def test_in_place_change_before_backward_is_refused():
    # The tape reads the input where it lies: torch's version check catches a later write.
    mod = grux.torch.MinGRU(3, 4, dtype=torch.float64)
    x = torch.randn(5, 2, 3, dtype=torch.float64, requires_grad=True)
    y = x * 1.0
    out, _ = mod(y)
    y.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()
