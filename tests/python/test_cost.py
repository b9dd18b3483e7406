"""grux.cost (the C++ cost model of one problem) and grux.profile (a per-layer table of a torch
module) against operation counts written here from the formulas in include/grux/cost.h,
gru.h, conv.h and docs/cost_model.md (seed: GRUCell = 6NH(I + H + 3.5) with bias; gemm: 2 per
multiply-add; mac: multiply-adds), parameter counts against torch's modules, and predictions
against the preset's documented rates (docs/cost_model.md) and a profile file written here.
Counts are exact integers: every comparison is ==; predicted times are floats computed by the
same division in C++ and here, compared to 1e-12 relative."""
import json
import math
import sys
import types

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

import grux
import grux.torch as gt


def numel(module):
    return sum(p.numel() for p in module.parameters())


def gru_macs(L, D, T, N, I, H, rows=None):
    """Multiply-adds of an nn.GRU forward (gru.h): rows * 3H * (in + H) per layer and
    direction, in = I for layer 0 and D*H above; rows = N*T (or the sum of the lengths)."""
    rows = N * T if rows is None else rows
    return sum(D * rows * 3 * H * ((I if layer == 0 else D * H) + H) for layer in range(L))


def conv_out(size, k, s, p):
    return (size + 2 * p - k) // s + 1


@pytest.fixture
def preset(monkeypatch, tmp_path):
    """No calibrated profile: the C++ falls back to its preset rates."""
    path = tmp_path / "no-profile.json"
    monkeypatch.setenv("GRUX_PROFILE", str(path))
    return str(path)


# ---- grux.cost ------------------------------------------------------------------------------

@pytest.mark.parametrize("N,I,H", [(1, 256, 256), (3, 5, 7), (8, 64, 32)])
def test_cost_gru_cell_counts(N, I, H):
    d = grux.cost("gru_cell", f"n{N}i{I}h{H}")
    # The seed formula (docs/cost_model.md), written as integers: 6NH(I + H + 3.5) = 3NH(2I + 2H + 7).
    assert 6 * N * H * (I + H + 3.5) == 3 * N * H * (2 * I + 2 * H + 7)
    assert d["forward_total_ops"] == 3 * N * H * (2 * I + 2 * H + 7)
    assert d["forward_total_MAC"] == N * 3 * H * (I + H)
    assert d["forward_total_FLOP"] == 2 * N * 3 * H * (I + H)
    assert d["parameters"] == numel(nn.GRUCell(I, H))
    assert d["parameter_bytes"] == 4 * numel(nn.GRUCell(I, H))
    assert d["op"] == "gru_cell" and d["problem"] == f"n{N}i{I}h{H}" and d["mode"] == "all"
    parts = sum(d[f"forward_{p}_ops"] for p in ("matmul", "bias", "elementwise", "activation"))
    assert parts == d["forward_total_ops"]
    assert all(type(v) in (int, float, str) for v in d.values())
    assert isinstance(d["forward_total_ops"], int)


def test_cost_readme_example_and_no_bias():
    assert grux.cost("gru_cell", "n1i256h256", "seed")["forward_total_ops"] == 791_808
    d = grux.cost("gru_cell", "n2i5h7", bias=False, dtype="float64")
    assert d["parameters"] == numel(nn.GRUCell(5, 7, bias=False))
    assert d["parameter_bytes"] == 8 * d["parameters"] and d["dtype"] == "f64"


@pytest.mark.parametrize("L,D", [(1, 1), (2, 2), (3, 1)])
def test_cost_gru(L, D):
    T, N, I, H = 11, 3, 6, 10
    d = grux.cost("gru", f"l{L}d{D}t{T}n{N}i{I}h{H}")
    assert d["forward_total_MAC"] == gru_macs(L, D, T, N, I, H)
    assert d["forward_total_FLOP"] == 2 * gru_macs(L, D, T, N, I, H)
    assert d["parameters"] == numel(nn.GRU(I, H, L, bidirectional=D == 2))
    # Variable lengths: the sum of the lengths in place of N*T, as a list or as spec string.
    lengths = [4, 11, 7]
    d = grux.cost("gru", f"l{L}d{D}t{T}n{N}i{I}h{H}", "mac", lengths=lengths)
    assert d["forward_total_MAC"] == gru_macs(L, D, T, N, I, H, rows=sum(lengths))
    assert d["forward_total_MAC"] == grux.cost("gru", f"l{L}d{D}t{T}n{N}i{I}h{H}", "mac",
                                               lengths=np.array(lengths))["forward_total_MAC"]
    spec = grux.cost("gru", f"l{L}d{D}t{T}n{N}i{I}h{H}", "mac", lengths="uniform:2:9:1")
    assert "lengths" in spec["variant"]
    assert spec["forward_total_MAC"] < d["forward_total_MAC"] * T  # fewer rows than N*T


@pytest.mark.parametrize("B,I,O,bias", [(32, 256, 512, True), (3, 5, 7, False)])
def test_cost_linear(B, I, O, bias):
    d = grux.cost("linear", f"b{B}i{I}o{O}", bias=bias)
    assert d["forward_total_MAC"] == B * I * O
    assert d["forward_total_FLOP"] == 2 * B * I * O
    # seed: a length-I dot product is I multiplies and I - 1 adds, the bias add 1 per output.
    assert d["forward_total_ops"] == B * O * (2 * I - 1) + (B * O if bias else 0)
    assert d["parameters"] == numel(nn.Linear(I, O, bias=bias))
    assert d["inference_activation_bytes"] == 4 * (B * I + B * O)  # input and output


@pytest.mark.parametrize("N,C,H,W,D,K,S,P,G", [(8, 16, 64, 64, 32, 3, 1, 0, 1),
                                               (2, 6, 9, 13, 4, 3, 2, 1, 2),
                                               (1, 4, 5, 5, 8, 5, 1, 2, 4)])
def test_cost_conv2d(N, C, H, W, D, K, S, P, G):
    d = grux.cost("conv2d", f"n{N}c{C}h{H}w{W}d{D}k{K}s{S}p{P}g{G}")
    conv = nn.Conv2d(C, D, K, stride=S, padding=P, groups=G)
    OH, OW = conv_out(H, K, S, P), conv_out(W, K, S, P)
    assert conv(torch.zeros(N, C, H, W)).shape == (N, D, OH, OW)  # the output size formula
    assert d["forward_total_MAC"] == N * D * OH * OW * (C // G) * K * K
    assert d["forward_total_FLOP"] == 2 * d["forward_total_MAC"]
    assert d["parameters"] == numel(conv)


def test_cost_conv1d():
    N, C, L, D, K, S, P = 2, 3, 20, 5, 3, 2, 1
    d = grux.cost("conv1d", f"n{N}c{C}l{L}d{D}k{K}s{S}p{P}", "mac")
    conv = nn.Conv1d(C, D, K, stride=S, padding=P)
    OL = conv_out(L, K, S, P)
    assert conv(torch.zeros(N, C, L)).shape == (N, D, OL)
    assert d["forward_total_MAC"] == N * D * OL * C * K
    assert d["parameters"] == numel(conv)


@pytest.mark.parametrize("op,per_element", [("relu", 1), ("sigmoid", 3), ("tanh", 7)])
def test_cost_activation(op, per_element):
    # cost.h: sigmoid 3 ops (exp, +, /), tanh 7 (four exps, -, +, /), ReLU 1; no GEMM work.
    d = grux.cost(op, "n1000")
    assert d["forward_total_ops"] == per_element * 1000
    assert d["forward_total_FLOP"] == 0 and d["forward_total_MAC"] == 0
    assert d["parameters"] == 0
    assert d["inference_activation_bytes"] == 2 * 1000 * 4


def test_cost_modes_and_train():
    one = grux.cost("linear", "b4i8o16", "gemm")
    assert one["mode"] == "gemm" and "forward_total_FLOP" in one
    assert not any(k.endswith("_ops") or k.endswith("_MAC") for k in one)
    assert "backward_total_FLOP" not in one and "training_predicted_ms" not in one
    allm = grux.cost("linear", "b4i8o16")
    for unit in ("ops", "FLOP", "MAC"):
        assert f"forward_total_{unit}" in allm
        assert f"inference_intensity_cached_{unit}_per_byte" in allm
    t = grux.cost("linear", "b4i8o16", "mac", train=True)
    # Backward of Linear: dx = dy W (B*I*O MACs) and dW = dy^T x (O*I*B MACs).
    assert t["backward_total_MAC"] == 2 * 4 * 8 * 16
    assert t["training_total_MAC"] == t["forward_total_MAC"] + t["backward_total_MAC"]
    assert {"training_activation_bytes", "gradient_bytes", "training_predicted_ms",
            "training_bound"} <= set(t)


def test_cost_prediction_preset(preset):
    """Without a profile the C++ predicts with its preset (docs/cost_model.md: 100 GFLOP/s per
    thread in f32, 10 GB/s memory) and the dict says so."""
    d = grux.cost("linear", "b256i1024o1024", threads=1)
    assert d["profile"].startswith("preset") and preset in d["profile"]
    assert d["profile_machine"] == "not calibrated" and d["threads"] == 1
    assert d["inference_compute_ms"] == pytest.approx(2 * 256 * 1024 * 1024 / 100e9 * 1e3,
                                                      rel=1e-12)
    # relu streams its input and output once at the memory bandwidth.
    r = grux.cost("relu", "n1000000", threads=1)
    assert r["inference_predicted_ms"] == pytest.approx(2 * 4e6 / 10e9 * 1e3, rel=1e-12)
    assert r["inference_bound"] == "traffic"
    assert d["inference_predicted_ms"] == pytest.approx(
        d["inference_roofline_ms"] + d["inference_overhead_ms"], rel=1e-12)


def test_cost_prediction_profile_file(tmp_path):
    profile = {"format": "grux-profile-1", "machine": "test box", "created": "2026-01-01",
               "threads": {"1": {"sgemm_gflops": 200.0, "dgemm_gflops": 80.0,
                                 "memcpy_gbps": 4.0, "step_us": 3.0, "stream_step_us": 5.0,
                                 "read_gbps": [[1e9, 7.0]]}}}
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile))
    d = grux.cost("linear", "b64i128o256", "gemm", dtype="float64", threads=1, profile_path=path)
    assert d["profile"] == str(path) and d["profile_machine"] == "test box"
    assert d["inference_compute_ms"] == pytest.approx(2 * 64 * 128 * 256 / 80e9 * 1e3, rel=1e-12)
    r = grux.cost("relu", "n1000000", threads=1, profile_path=str(path))
    assert r["inference_predicted_ms"] == pytest.approx(2 * 4e6 / 4e9 * 1e3, rel=1e-12)
    with pytest.raises(grux.Error, match="missing.json"):
        grux.cost("relu", "n10", profile_path=tmp_path / "missing.json")


def test_cost_errors():
    with pytest.raises(grux.Error, match=r"unknown operator 'nope' \(expected one of gru, .*linear"):
        grux.cost("nope", "n1")
    with pytest.raises(grux.Error, match="b32i256"):
        grux.cost("linear", "b32i256")
    with pytest.raises(grux.Error, match=r"descriptor 'n0i4h4': n0 \(expected >= 1\)"):
        grux.cost("gru_cell", "n0i4h4")
    with pytest.raises(grux.Error, match="mode: 'flops'"):
        grux.cost("linear", "b1i2o3", "flops")
    with pytest.raises(grux.Error, match="op: expected a str, got int"):
        grux.cost(3, "b1i2o3")
    with pytest.raises(grux.Error, match="linear takes no --lengths"):
        grux.cost("linear", "b1i2o3", lengths=[1])
    with pytest.raises(grux.Error, match="relu takes no --no-bias"):
        grux.cost("relu", "n4", bias=False)
    with pytest.raises(grux.Error, match="lengths: expected"):
        grux.cost("gru", "t4n2i3h5", lengths=[1.5, 2.0])
    with pytest.raises(grux.Error, match="dtype"):
        grux.cost("linear", "b1i2o3", dtype="int8")
    with pytest.raises(grux.Error, match="threads"):
        grux.cost("linear", "b1i2o3", threads=0)
    names = [o["name"] for o in grux.cost_ops()]
    assert {"gru", "gru_cell", "linear", "conv1d", "conv2d", "relu", "sigmoid", "tanh"} <= set(names)


# ---- grux.profile ---------------------------------------------------------------------------

def test_profile_sequential_rows():
    torch.manual_seed(0)
    # Linear on (2, 3, 20): 6 rows of 20; Conv1d on (2, 3, 24); Unflatten (a view: no
    # arithmetic) makes (2, 1, 5, 24) for Conv2d.
    model = nn.Sequential(nn.Linear(20, 24), nn.ReLU(), nn.Conv1d(3, 5, 3, padding=1),
                          nn.Sigmoid(), nn.Unflatten(1, (1, 5)), nn.Conv2d(1, 2, 3, stride=2),
                          nn.Tanh())
    x = torch.randn(2, 3, 20)
    p = grux.profile(model, x)
    rows = {r.name: r for r in p}
    assert len(p) == 7 and [r.name for r in p] == [str(i) for i in range(7)]
    lin, relu, c1, sig, unfl, c2, tanh = (rows[str(i)] for i in range(7))
    assert lin.type == "Linear" and lin.problem == "linear b6i20o24" and lin.calls == 1
    assert lin.macs == 6 * 20 * 24 and lin.gemm_flop == 2 * 6 * 20 * 24
    assert lin.operations == 6 * 24 * (2 * 20 - 1) + 6 * 24
    assert relu.operations == 2 * 3 * 24 and relu.macs == 0
    assert c1.macs == 2 * 5 * 24 * 3 * 3 and c1.parameters == numel(model[2])
    assert sig.operations == 3 * 2 * 5 * 24
    assert (unfl.operations, unfl.gemm_flop, unfl.macs, unfl.parameters, unfl.note) == (0, 0, 0, 0,
                                                                                      None)
    OH, OW = conv_out(5, 3, 2, 0), conv_out(24, 3, 2, 0)
    assert c2.macs == 2 * 2 * OH * OW * 1 * 3 * 3
    assert tanh.operations == 7 * 2 * 2 * OH * OW
    for r, m in zip(p, model):
        assert r.parameters == numel(m)
        assert r.parameter_bytes == 4 * numel(m)
    assert lin.activation_bytes == 4 * (6 * 20 + 6 * 24)
    assert all(r.predicted_ms > 0 for r in p if r.operations)
    # Totals: the column sums.
    t = p.total
    assert t.name == "total" and t.parameters == numel(model)
    for k in ("calls", "operations", "gemm_flop", "macs", "parameters", "parameter_bytes",
              "activation_bytes"):
        assert getattr(t, k) == sum(getattr(r, k) for r in p if getattr(r, k) is not None)
    assert t.predicted_ms == pytest.approx(sum(r.predicted_ms for r in p if r.predicted_ms),
                                           rel=1e-12)


def test_profile_matches_cost():
    """Each row is grux.cost of its problem (the numbers come from the C++ model)."""
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh())
    p = grux.profile(model, torch.randn(5, 8), threads=1)
    d = grux.cost("linear", "b5i8o16", threads=1)
    r = p[0]
    assert (r.operations, r.gemm_flop, r.macs, r.parameters, r.parameter_bytes,
            r.activation_bytes) == (d["forward_total_ops"], d["forward_total_FLOP"],
                                    d["forward_total_MAC"], d["parameters"],
                                    d["parameter_bytes"], d["inference_activation_bytes"])
    assert r.predicted_ms == d["inference_predicted_ms"]
    assert p.threads == 1 and p.profile == d["profile"]


@pytest.mark.parametrize("cls", [nn.GRU, gt.GRU])
@pytest.mark.parametrize("L,bidirectional,batch_first", [(1, False, False), (2, True, False),
                                                         (2, False, True), (2, True, True)])
def test_profile_gru(cls, L, bidirectional, batch_first):
    T, N, I, H = 7, 3, 5, 6
    torch.manual_seed(1)
    gru = cls(I, H, L, bidirectional=bidirectional, batch_first=batch_first)
    x = torch.randn((N, T, I) if batch_first else (T, N, I))
    p = grux.profile(gru, x)
    assert len(p) == 1
    r = p[0]
    D = 2 if bidirectional else 1
    assert r.name == "" and r.problem == f"gru l{L}d{D}t{T}n{N}i{I}h{H}"
    assert r.macs == gru_macs(L, D, T, N, I, H)
    assert r.parameters == numel(gru)
    assert r.operations == grux.cost("gru", f"l{L}d{D}t{T}n{N}i{I}h{H}")["forward_total_ops"]
    assert str(p).count("\n") >= 4


def test_profile_gru_packed_and_unbatched():
    T, N, I, H = 9, 3, 4, 5
    gru = nn.GRU(I, H, 2)
    lengths = [9, 4, 6]
    packed = pack_padded_sequence(torch.randn(T, N, I), torch.tensor(lengths),
                                  enforce_sorted=False)
    r = grux.profile(gru, packed)[0]
    assert r.macs == gru_macs(2, 1, T, N, I, H, rows=sum(lengths))
    r = grux.profile(gru, torch.randn(T, I))[0]  # unbatched: N = 1
    assert r.problem == f"gru l2d1t{T}n1i{I}h{H}"


@pytest.mark.parametrize("cls", [nn.GRUCell, gt.GRUCell])
@pytest.mark.parametrize("bias", [True, False])
def test_profile_gru_cell_seed_formula(cls, bias):
    N, I, H = 4, 10, 12
    cell = cls(I, H, bias=bias)
    r = grux.profile(cell, torch.randn(N, I), torch.randn(N, H))[0]
    if bias:
        assert r.operations == 6 * N * H * (I + H + 3.5)  # docs/cost_model.md's seed formula
    assert r.macs == N * 3 * H * (I + H)
    assert r.parameters == numel(cell)
    r1 = grux.profile(cell, torch.randn(I))[0]  # unbatched (I,): N = 1
    assert r1.problem == f"gru_cell n1i{I}h{H}"


@pytest.mark.parametrize("cls", [nn.LSTM, gt.LSTM])
@pytest.mark.parametrize("L,bidirectional,proj", [(1, False, 0), (2, True, 0), (2, True, 3)])
def test_profile_lstm(cls, L, bidirectional, proj):
    T, N, I, H = 7, 3, 5, 6
    lstm = cls(I, H, L, bidirectional=bidirectional, proj_size=proj)
    r = grux.profile(lstm, torch.randn(T, N, I))[0]
    D, Ho = 2 if bidirectional else 1, proj or H
    desc = f"l{L}d{D}t{T}n{N}i{I}h{H}" + (f"p{proj}" if proj else "")
    assert r.problem == "lstm " + desc
    macs = sum(D * T * N * (4 * H * ((I if l == 0 else D * Ho) + Ho) + proj * H) for l in range(L))
    assert r.macs == macs
    assert r.parameters == numel(lstm)
    assert r.operations == grux.cost("lstm", desc)["forward_total_ops"]
    lengths = [7, 2, 5]
    packed = pack_padded_sequence(torch.randn(T, N, I), torch.tensor(lengths),
                                  enforce_sorted=False)
    assert grux.profile(lstm, packed)[0].macs * T * N == macs * sum(lengths)


@pytest.mark.parametrize("cls", [nn.LSTMCell, gt.LSTMCell])
def test_profile_lstm_cell_seed_formula(cls):
    N, I, H = 4, 10, 12
    cell = cls(I, H)
    r = grux.profile(cell, torch.randn(N, I))[0]
    assert r.problem == f"lstm_cell n{N}i{I}h{H}"
    assert r.operations == N * H * (8 * I + 8 * H + 31)  # docs/cost_model.md's LSTMCell count
    assert r.macs == N * 4 * H * (I + H)
    assert r.parameters == numel(cell)


def test_profile_float64_and_unknown_layers():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(torch.ones(3))
            self.conv = nn.Conv2d(3, 4, 3, bias=False)
            self.norm = nn.LayerNorm(6)
            self.act = nn.GELU(approximate="tanh")
            self.lin = nn.Linear(6, 2).double()

        def forward(self, x):
            y = self.act(self.norm(self.conv(x * self.scale[:, None, None])))
            return self.lin(y.double())

    m = Block()
    p = grux.profile(m, torch.randn(2, 3, 8, 8))
    rows = {r.name: r for r in p}
    own = rows[""]
    assert own.parameters == 3 and own.operations is None and own.calls is None
    conv = rows["conv"]  # no bias: P (2 taps - 1)
    assert conv.operations == 2 * 4 * 6 * 6 * (2 * 27 - 1) and conv.parameters == numel(m.conv)
    assert rows["norm"].parameters == numel(m.norm) and rows["norm"].macs is None
    assert rows["norm"].note == "LayerNorm is not in the cost model"
    assert rows["act"].operations is None and "approximate='tanh'" in rows["act"].note
    lin = rows["lin"]
    assert lin.macs == 2 * 4 * 6 * 6 * 2 and lin.parameter_bytes == 8 * numel(m.lin)
    assert p.total.parameters == numel(m)
    text = str(p)
    assert "GELU" in text and "-" in text and "LayerNorm" in text


@pytest.mark.parametrize("conv,shape", [
    (nn.Conv2d(4, 6, (3, 5), stride=(2, 1), padding=(1, 2), dilation=(2, 1), groups=2,
               bias=False), (2, 4, 11, 9)),
    (nn.Conv2d(3, 2, 3, padding="same", dilation=2, padding_mode="reflect"), (1, 3, 8, 7)),
    (nn.Conv1d(3, 3, 3, dilation=4, padding="same"), (2, 3, 20)),
    (nn.Conv1d(2, 4, 4, stride=3, dilation=2, bias=False), (2, 17)),  # unbatched
])
def test_profile_convolutions_of_any_shape(conv, shape):
    """Kernels, strides, padding and dilation per dimension, with or without bias: the row's
    counts follow from the output torch computes."""
    p = grux.profile(conv, torch.randn(*shape))
    r = p[0]
    assert r.note is None, r.note
    out = conv(torch.randn(*shape))
    outputs = out.numel()
    taps = conv.in_channels // conv.groups * math.prod(conv.kernel_size)
    assert r.macs == outputs * taps and r.gemm_flop == 2 * outputs * taps
    bias = conv.bias is not None
    assert r.operations == outputs * (2 * taps - 1) + (outputs if bias else 0)
    assert r.parameters == numel(conv)
    if shape == (2, 4, 11, 9):
        assert r.problem == "conv2d n2c4h11w9d6k3x5s2x1p1x2r2x1g2"


def test_profile_activations_and_layers_without_arithmetic():
    model = nn.Sequential(nn.GELU(), nn.SiLU(), nn.LeakyReLU(0.2), nn.Dropout(0.5), nn.Flatten(),
                          nn.Identity())
    model.eval()
    p = grux.profile(model, torch.randn(2, 3, 4))
    gelu, silu, leaky, drop, flat, ident = p
    assert (gelu.operations, silu.operations, leaky.operations) == (5 * 24, 4 * 24, 2 * 24)
    assert gelu.problem == "gelu n24" and gelu.macs == 0
    for r in (drop, flat, ident):
        assert (r.operations, r.gemm_flop, r.macs, r.note) == (0, 0, 0, None)
    model.train()  # dropout that draws a mask is not counted
    drop = grux.profile(model, torch.randn(2, 3, 4))[3]
    assert drop.operations is None and "Dropout" in drop.note


def test_profile_shared_module_and_unused():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.unused = nn.Linear(4, 9)

        def forward(self, x):
            return self.lin(self.lin(x))

    m = Twice()
    p = grux.profile(m, torch.randn(3, 4))
    lin, unused = p[0], p[1]
    assert lin.calls == 2 and lin.macs == 2 * 3 * 4 * 4 and lin.parameters == numel(m.lin)
    assert unused.calls == 0 and unused.macs is None and unused.parameters == numel(m.unused)
    assert p.total.parameters == numel(m)


def test_profile_printing_and_iteration():
    model = nn.ModuleList([nn.Linear(3, 4), nn.ReLU()])

    class Wrap(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = model

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    p = grux.profile(Wrap(), torch.randn(2, 3))
    assert len(p) == 2 and [r.name for r in p] == ["layers.0", "layers.1"]
    assert isinstance(p[0], grux.ProfileRow) and p[0]._asdict()["macs"] == 2 * 3 * 4
    text = str(p)
    lines = text.splitlines()
    assert lines[0].startswith("layer") and "MACs" in lines[0] and "predicted ms" in lines[0]
    table = lines[:5]  # header, rule, 2 rows, rule, then the total
    total = [line for line in lines if line.startswith("total")]
    assert len(total) == 1 and "24" in total[0]  # total MACs 2*3*4 = 24
    # Aligned: the header, the rows and the total end at the same column (numbers are
    # right-aligned and the last column is filled on every line).
    assert len({len(line) for line in table + total}) == 1
    assert repr(p) == text
    assert "rates from" in text


def test_profile_to_dataframe(monkeypatch):
    p = grux.profile(nn.Linear(3, 4), torch.randn(2, 3))
    monkeypatch.setitem(sys.modules, "pandas", None)  # as if pandas were not installed
    with pytest.raises(ImportError, match="pandas"):
        p.to_dataframe()
    seen = {}

    def frame(data, columns):
        seen["data"], seen["columns"] = data, columns
        return "frame"

    monkeypatch.setitem(sys.modules, "pandas", types.SimpleNamespace(DataFrame=frame))
    assert p.to_dataframe() == "frame"
    assert seen["columns"] == list(grux.ProfileRow._fields)
    assert seen["data"] == [p[0]._asdict()]


def test_profile_to_dataframe_real_pandas():
    pd = pytest.importorskip("pandas")
    p = grux.profile(nn.Sequential(nn.Linear(3, 4), nn.ReLU()), torch.randn(2, 3))
    df = p.to_dataframe()
    assert isinstance(df, pd.DataFrame) and len(df) == 2
    assert int(df["macs"].iloc[0]) == 2 * 3 * 4


def test_profile_errors():
    with pytest.raises(grux.Error, match="module: expected a torch.nn.Module, got int"):
        grux.profile(42)
    lin = nn.Linear(3, 4)
    with pytest.raises(RuntimeError, match="mat1 and mat2"):  # the module's own error
        grux.profile(lin, torch.randn(2, 5))
    assert not lin._forward_hooks  # the hooks were removed
    with pytest.raises(grux.Error, match="threads"):
        grux.profile(lin, torch.randn(2, 3), threads=-1)
    # A layer the model cannot cost (a zero-size batch) gets a note, not an error.
    r = grux.profile(lin, torch.randn(0, 3))[0]
    assert r.macs is None and "b0i3o4" in r.note and r.parameters == numel(lin)
