"""grux.conv1d / grux.conv2d against torch.nn.functional.conv1d / conv2d for every algorithm
(values, and gradients through the torch.autograd.Function: gradcheck in f64), and
grux.rearrange against NumPy reshape/transpose written by hand; views, the GIL, errors."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import grux
from gil_check import ticks_during

ALGOS = ["loops", "im2col", "toeplitz"]


def tol(dtype, reduction):
    """Each output sums `reduction` products of O(1) values: rounding grows at most linearly
    with it (unit roundoff 6e-8 in f32, 1.1e-16 in f64), with a 10x margin."""
    return (6e-7 if dtype == np.float32 else 1.2e-15) * reduction


# (C, D, kernel, stride, padding, dilation, groups, bias) for conv2d; stride / padding /
# dilation as given to both libraries (int or (h, w) pair).
CONV2D = [
    (3, 4, (3, 3), 1, 0, 1, 1, True),
    (3, 4, (3, 2), 2, 1, 1, 1, False),
    (4, 6, (3, 3), (2, 1), (1, 2), (2, 1), 2, True),
    (6, 6, (2, 3), 1, (0, 1), 2, 3, True),  # depthwise-like: 3 groups of 2
    (4, 8, (1, 1), 3, 0, 1, 4, False),
]


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("C,D,k,stride,padding,dilation,groups,bias", CONV2D)
def test_conv2d_matches_torch(algo, dtype, C, D, k, stride, padding, dilation, groups, bias):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, C, 9, 8)).astype(dtype)
    w = rng.standard_normal((D, C // groups, *k)).astype(dtype)
    b = rng.standard_normal(D).astype(dtype) if bias else None
    y = grux.conv2d(x, w, b, stride, padding, dilation, groups, algo=algo)
    assert isinstance(y, np.ndarray) and y.dtype == dtype
    ref = F.conv2d(torch.from_numpy(x), torch.from_numpy(w), None if b is None else torch.from_numpy(b),
                   stride, padding, dilation, groups).numpy()
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, atol=tol(dtype, C // groups * k[0] * k[1] + 1), rtol=0)
    # Unbatched (C, H, W) -> (D, OH, OW); torch tensors in -> torch tensors out.
    u = grux.conv2d(torch.from_numpy(x[1]), torch.from_numpy(w), None if b is None else torch.from_numpy(b),
                    stride=stride, padding=padding, dilation=dilation, groups=groups, algo=algo)
    assert isinstance(u, torch.Tensor) and u.shape == ref.shape[1:]
    np.testing.assert_allclose(u.numpy(), ref[1], atol=tol(dtype, C // groups * k[0] * k[1] + 1),
                               rtol=0)


# (C, D, K, stride, padding, dilation, groups, bias) for conv1d.
CONV1D = [
    (3, 5, 3, 1, 0, 1, 1, True),
    (4, 4, 4, 2, 3, 1, 2, False),
    (6, 3, 2, 3, 1, 3, 3, True),
    (2, 4, 5, (1,), (2,), (2,), 1, True),
]


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("C,D,K,stride,padding,dilation,groups,bias", CONV1D)
def test_conv1d_matches_torch(algo, dtype, C, D, K, stride, padding, dilation, groups, bias):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, C, 17)).astype(dtype)
    w = rng.standard_normal((D, C // groups, K)).astype(dtype)
    b = rng.standard_normal(D).astype(dtype) if bias else None
    y = grux.conv1d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups,
                    algo=algo)
    ref = F.conv1d(torch.from_numpy(x), torch.from_numpy(w), None if b is None else torch.from_numpy(b),
                   stride, padding, dilation, groups).numpy()
    assert y.shape == ref.shape and y.dtype == dtype
    np.testing.assert_allclose(y, ref, atol=tol(dtype, C // groups * K + 1), rtol=0)
    u = grux.conv1d(x[0], w, b, stride=stride, padding=padding, dilation=dilation, groups=groups,
                    algo=algo)
    assert u.shape == ref.shape[1:]
    np.testing.assert_allclose(u, ref[0], atol=tol(dtype, C // groups * K + 1), rtol=0)


@pytest.mark.parametrize("algo", ALGOS)
def test_conv_gradcheck_f64(algo):
    # Finite differences against grux's conv backward, for input, weight and bias.
    torch.manual_seed(3)
    x = torch.randn(2, 4, 6, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(6, 2, 3, 2, dtype=torch.float64, requires_grad=True)
    b = torch.randn(6, dtype=torch.float64, requires_grad=True)
    f2 = lambda x, w, b: grux.conv2d(x, w, b, stride=(2, 1), padding=1, dilation=(1, 2),  # noqa: E731
                                     groups=2, algo=algo)
    assert torch.autograd.gradcheck(f2, (x, w, b))
    x1 = torch.randn(2, 3, 9, dtype=torch.float64, requires_grad=True)
    w1 = torch.randn(3, 1, 3, dtype=torch.float64, requires_grad=True)
    f1 = lambda x, w: grux.conv1d(x, w, stride=2, padding=2, dilation=2, groups=3, algo=algo)  # noqa: E731
    assert torch.autograd.gradcheck(f1, (x1, w1))
    # Unbatched input, gradient of the input only (weight does not require grad).
    xu = torch.randn(4, 5, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: grux.conv2d(x, w.detach(), groups=2, algo=algo), (xu,))


@pytest.mark.parametrize("algo", ALGOS)
def test_conv_gradients_match_torch_f32(algo):
    torch.manual_seed(4)
    x = torch.randn(2, 4, 7, 6, requires_grad=True)
    w = torch.randn(4, 2, 3, 3, requires_grad=True)
    b = torch.randn(4, requires_grad=True)
    y = grux.conv2d(x, w, b, stride=2, padding=(1, 0), groups=2, algo=algo)
    assert y.requires_grad and y.dtype == torch.float32
    gy = torch.randn_like(y)
    (y * gy).sum().backward()
    rx, rw, rb = (t.detach().clone().requires_grad_() for t in (x, w, b))
    (F.conv2d(rx, rw, rb, stride=2, padding=(1, 0), groups=2) * gy).sum().backward()
    # Gradients sum over the batch and output pixels (<= 2*4*12 terms for dweight).
    for got, want, n in ((x.grad, rx.grad, 18 * 2), (w.grad, rw.grad, 2 * 12), (b.grad, rb.grad, 2 * 12)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), atol=tol(np.float32, n * 4), rtol=0)


def test_no_grad_path_returns_plain_tensor():
    w = torch.randn(2, 3, 3, requires_grad=True)
    x = torch.randn(1, 3, 8)
    with torch.no_grad():
        y = grux.conv1d(x, w)
    assert not y.requires_grad
    torch.testing.assert_close(y, F.conv1d(x, w.detach()), atol=tol(np.float32, 9), rtol=0)


def test_toeplitz_refuses_large_problems():
    x = np.zeros((1, 8, 128, 128), np.float32)
    w = np.zeros((8, 8, 3, 3), np.float32)
    with pytest.raises(grux.Error, match="toeplitz.*im2col"):
        grux.conv2d(x, w, algo="toeplitz")
    assert grux.conv2d(x, w).shape == (1, 8, 126, 126)


def test_gil_released_while_computing():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((16, 32, 96, 96)).astype(np.float32)
    w = rng.standard_normal((64, 32, 3, 3)).astype(np.float32)
    # While grux ran, the other thread kept ticking (it would be frozen if the GIL were held).
    n, alone = ticks_during(lambda: grux.conv2d(x, w, padding=1, threads=1))
    assert alone > 0.02, "problem too small to observe the GIL"
    assert n >= 5, f"{n} ticks in {alone:.3f} s"


X4 = np.zeros((2, 4, 5, 5), np.float32)
W4 = np.zeros((6, 4, 3, 3), np.float32)


@pytest.mark.parametrize("call,message", [
    (lambda: grux.conv2d(X4, np.zeros((6, 3, 3, 3), np.float32)), "C/groups = 4"),
    (lambda: grux.conv2d(X4, W4, algo="fft"), "'fft' is unknown (expected one of loops, im2col, toeplitz)"),
    (lambda: grux.conv2d(X4[0, 0], W4), "expected (N, C, H, W) or unbatched (C, H, W)"),
    (lambda: grux.conv2d(X4, W4[0]), "weight has shape"),
    (lambda: grux.conv1d(X4, W4[..., 0]), "expected (N, C, L) or unbatched (C, L)"),
    (lambda: grux.conv2d(X4, W4, groups=3), "groups"),
    (lambda: grux.conv2d(X4, W4, np.zeros(5, np.float32)), "bias"),
    (lambda: grux.conv2d(X4, W4.astype(np.float64)), "weight"),
    (lambda: grux.conv2d(X4, W4, padding="same"), "padding: 'same' is not supported"),
    (lambda: grux.conv1d(X4[0], W4[:, :, 0], padding="valid"), "padding: 'valid' is not supported"),
    (lambda: grux.conv2d(X4, W4, stride=(1, 2, 3)), "stride"),
    (lambda: grux.conv2d(X4, W4, stride=0), "stride"),
    (lambda: grux.conv2d(X4, W4, dilation=1.5), "dilation"),
    (lambda: grux.conv2d(X4, np.zeros((6, 4, 7, 7), np.float32)), "larger than the padded input"),
    (lambda: grux.conv2d(X4.astype(np.float16), W4), "input: dtype float16"),
    (lambda: grux.conv2d(torch.zeros(2, 4, 5, 5, dtype=torch.int32), W4), "input"),
    (lambda: grux.conv2d(X4, torch.zeros(6, 4, 3, 3, requires_grad=True)), "input: expected a torch.Tensor"),
])
def test_conv_errors(call, message):
    with pytest.raises(grux.Error) as e:
        call()
    text = str(e.value)
    assert "\n" not in text and message in text, text


# ---- rearrange ---------------------------------------------------------------------------

def arange(*shape, dtype=np.float64):
    return np.arange(np.prod(shape), dtype=dtype).reshape(shape)


# pattern, sizes, input shape, NumPy equivalent, whether the header promises a view.
REARRANGE = [
    ("b c h w -> b h w c", {}, (2, 3, 4, 5), lambda x: x.transpose(0, 2, 3, 1), True),
    ("b (h w) c -> b c h w", {"h": 4}, (2, 12, 3), lambda x: x.reshape(2, 4, 3, 3).transpose(0, 3, 1, 2), True),
    ("(b1 b2) h -> b1 b2 h", {"b2": 2}, (6, 5), lambda x: x.reshape(3, 2, 5), True),
    ("h w -> 1 1 h w", {}, (3, 4), lambda x: x.reshape(1, 1, 3, 4), True),
    ("... h w -> ... w h", {}, (2, 3, 4, 5), lambda x: x.swapaxes(-1, -2), True),
    ("b 1 c -> b c", {}, (4, 1, 3), lambda x: x[:, 0, :], True),
    ("b () c -> c b", {}, (4, 1, 3), lambda x: x[:, 0, :].T, True),
    ("b c h w -> b (c h w)", {}, (2, 3, 4, 5), lambda x: x.reshape(2, 60), None),
    ("b ... -> b (...)", {}, (2, 3, 4), lambda x: x.reshape(2, 12), None),
    ("b c h w -> b (w h) c", {}, (2, 3, 4, 5), lambda x: x.transpose(0, 3, 2, 1).reshape(2, 20, 3), None),
    ("b h w -> (w b) h", {}, (2, 3, 4), lambda x: x.transpose(2, 0, 1).reshape(8, 3), None),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("pattern,sizes,shape,expected,view", REARRANGE)
def test_rearrange_matches_numpy(dtype, pattern, sizes, shape, expected, view):
    x = arange(*shape, dtype=dtype)
    y = grux.rearrange(x, pattern, **sizes)
    want = expected(x)
    assert y.dtype == dtype and y.shape == want.shape
    np.testing.assert_array_equal(y, want)  # exact: elements are moved, not computed
    if view:
        assert np.shares_memory(x, y)
        # A write through the view lands in the input.
        y[(0,) * y.ndim] = -1
        assert x.flat[0] == -1
    elif not np.shares_memory(x, y):
        assert y.flags.c_contiguous  # a copy is contiguous
    # torch in -> torch out, sharing memory as NumPy did.
    t = torch.from_numpy(x)
    ty = grux.rearrange(t, pattern, **sizes)
    assert isinstance(ty, torch.Tensor)
    np.testing.assert_array_equal(ty.numpy(), grux.rearrange(x, pattern, **sizes))
    assert np.shares_memory(ty.numpy(), x) == np.shares_memory(y, x)


def test_rearrange_copies_when_strides_cannot_express_it():
    # (w h) in reversed memory order cannot be one strided dimension: a contiguous copy.
    x = arange(3, 4)
    y = grux.rearrange(x, "h w -> (w h)")
    np.testing.assert_array_equal(y, x.T.reshape(-1))
    assert not np.shares_memory(x, y) and y.flags.c_contiguous


def test_rearrange_strided_and_readonly_input():
    big = arange(4, 6, 8)
    x = big[:, ::2, 1:]  # a strided view of (4, 3, 7)
    y = grux.rearrange(x, "a b c -> c a b")
    np.testing.assert_array_equal(y, x.transpose(2, 0, 1))
    assert np.shares_memory(y, big)
    ro = arange(2, 3)
    ro.flags.writeable = False
    r = grux.rearrange(ro, "a b -> b a")
    assert np.shares_memory(r, ro) and not r.flags.writeable


def test_rearrange_gradients():
    t = torch.randn(2, 12, 3, dtype=torch.float64, requires_grad=True)
    f = lambda t: grux.rearrange(t, "b (h w) c -> w (c b) h", h=4)  # noqa: E731
    y = f(t)
    assert y.requires_grad
    np.testing.assert_array_equal(y.detach().numpy(),
                                  t.detach().numpy().reshape(2, 4, 3, 3).transpose(2, 3, 0, 1).reshape(3, 6, 4))
    assert torch.autograd.gradcheck(f, (t,))
    # The gradient is the upstream gradient moved back: for sum(y * g), exactly g rearranged.
    g = torch.randn_like(y)
    (y * g).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), grux.rearrange(g, "w (c b) h -> b (h w) c", b=2).numpy())


@pytest.mark.parametrize("pattern,sizes,message", [
    ("b c h w -> b h w c", {}, "rank"),                   # 3-d input, 4 axes
    ("b c h -> b c", {}, "h"),                            # an axis lost
    ("b c h -> b c h h", {}, "h"),                        # an axis twice
    ("b c h", {}, "->"),                                  # no arrow
    ("b (c x y) h -> b c x y h", {"c": 3}, "x"),         # two unknown sizes in a group
    ("b (c x) h -> b c x h", {"x": 5}, "5"),              # size does not divide
    ("b c h -> b c h k", {}, "k"),                        # a new name on the right
    ("b c 1 -> b c", {}, "1"),                            # "1" against a dimension of size 4
    ("b c h -> b (c h", {}, "("),                         # unbalanced parenthesis
    ("b c 2h -> b c", {}, "2h"),                          # not an axis name
])
def test_rearrange_errors(pattern, sizes, message):
    x = arange(2, 3, 4)
    with pytest.raises(grux.Error) as e:
        grux.rearrange(x, pattern, **sizes)
    text = str(e.value)
    assert "\n" not in text and f"'{pattern}'" in text and message in text, text


def test_rearrange_argument_errors():
    with pytest.raises(grux.Error, match="pattern: expected a string"):
        grux.rearrange(arange(2, 3), 5)
    with pytest.raises(grux.Error, match="h: expected an integer"):
        grux.rearrange(arange(12), "(h w) -> h w", h=2.5)
    with pytest.raises(grux.Error, match="tensor: dtype int32"):
        grux.rearrange(arange(2, 3).astype(np.int32), "a b -> b a")


def test_second_derivatives_are_refused():
    # grux's conv backward is not itself differentiable: create_graph must fail loudly.
    x = torch.randn(1, 2, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 2, 2, dtype=torch.float64, requires_grad=True)
    (gx,) = torch.autograd.grad((grux.conv1d(x, w) ** 2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        gx.sum().backward()
