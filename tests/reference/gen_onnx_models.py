"""Writes the ONNX test files of tests/test_onnx.cpp and their expected outputs.

files/<case>.onnx: torch.onnx.export (Debian's python3-torch) of nn.GRU / nn.LSTM models, and
graphs built with onnx.helper for what torch does not write (linear_before_reset 0, layout 1,
weights as graph inputs). golden/<case>.<name>.npy: the input and every graph output. For the
torch files the expected outputs are PyTorch's, in float64 (the model cast to double), rounded
to f32; for the helper graphs an implementation of the ONNX GRU/LSTM equations below, written
from the operator's specification, in float64. Every file passes onnx.checker.

Run: /usr/bin/python3 tests/reference/gen_onnx_models.py (deterministic: seeded weights).
"""
import os
import zlib

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = os.path.join(HERE, "onnx", "files")
GOLDEN = os.path.join(HERE, "onnx", "golden")


def save_golden(case, arrays):
    for name, a in arrays.items():
        np.save(os.path.join(GOLDEN, f"{case}.{name}.npy"), np.asarray(a, dtype=np.float32))


def export(case, module, x, input_names, output_names, dynamic_axes):
    torch.manual_seed(0)
    path = os.path.join(FILES, case + ".onnx")
    module.eval()
    torch.onnx.export(module, (x,), path, input_names=input_names, output_names=output_names,
                      opset_version=14, dynamic_axes=dynamic_axes)
    onnx.checker.check_model(onnx.load(path))
    with torch.no_grad():
        outs = module.double()(x.double())
    if not isinstance(outs, tuple):
        outs = (outs,)
    flat = []
    for o in outs:
        flat.extend(o if isinstance(o, tuple) else (o,))
    arrays = {input_names[0]: x.numpy()}
    for name, o in zip(output_names, flat):
        arrays[name] = o.numpy()
    save_golden(case, arrays)


class Head(torch.nn.Module):
    """A recurrent stack and a Linear head; optional tanh, last step, skip."""

    def __init__(self, rnn, out, act=None, last=False, skip=False):
        super().__init__()
        self.rnn, self.lin, self.act, self.last, self.skip = rnn, torch.nn.Linear(rnn.hidden_size, out), act, last, skip

    def forward(self, x):
        y, _ = self.rnn(x)
        if self.last:
            y = y[:, -1] if self.rnn.batch_first else y[-1]
        y = self.lin(y)
        if self.act == "tanh":
            y = torch.tanh(y)
        if self.act == "softmax":
            y = torch.softmax(y, dim=-1)
        if self.skip:
            y = y + x
        return y


def torch_cases():
    torch.manual_seed(1)
    tn = {"x": {0: "T", 1: "N"}}
    bf = {"x": {0: "N", 1: "T"}}
    export("torch_gru", torch.nn.GRU(3, 8), torch.randn(11, 2, 3), ["x"], ["y", "h"],
           {"x": {0: "T", 1: "N"}, "y": {0: "T", 1: "N"}, "h": {1: "N"}})
    export("torch_gru_2layers_batch_first", torch.nn.GRU(2, 6, num_layers=2, batch_first=True),
           torch.randn(3, 9, 2), ["x"], ["y", "h"], {"x": {0: "N", 1: "T"}})
    export("torch_lstm_2layers", torch.nn.LSTM(3, 5, num_layers=2), torch.randn(7, 2, 3), ["x"],
           ["y", "h", "c"], {"x": {0: "T", 1: "N"}})
    export("torch_lstm_head_batch_first", Head(torch.nn.LSTM(1, 8, batch_first=True), 1),
           torch.randn(2, 13, 1), ["x"], ["out"], bf)
    export("torch_gru_last_step_softmax", Head(torch.nn.GRU(4, 7, batch_first=True), 3, "softmax", last=True),
           torch.randn(2, 10, 4), ["x"], ["probs"], bf)
    export("torch_lstm_tanh_skip", Head(torch.nn.LSTM(2, 6), 2, "tanh", skip=True),
           torch.randn(8, 1, 2), ["x"], ["out"], tn)


# The ONNX equations (gates z, r, h for GRU; i, o, f, c for LSTM), float64.
def sig(v):
    return 1 / (1 + np.exp(-v))


def onnx_gru(X, W, R, B, H, lbr, layout):
    if layout == 1:
        X = X.transpose(1, 0, 2)
    T, N, _ = X.shape
    Wz, Wr, Wh = np.split(W[0], 3)
    Rz, Rr, Rh = np.split(R[0], 3)
    b = B[0] if B is not None else np.zeros(6 * H)
    Wbz, Wbr, Wbh, Rbz, Rbr, Rbh = np.split(b, 6)
    h = np.zeros((N, H))
    Y = np.zeros((T, 1, N, H))
    for t in range(T):
        x = X[t]
        z = sig(x @ Wz.T + h @ Rz.T + Wbz + Rbz)
        r = sig(x @ Wr.T + h @ Rr.T + Wbr + Rbr)
        if lbr:
            c = np.tanh(x @ Wh.T + r * (h @ Rh.T + Rbh) + Wbh)
        else:
            c = np.tanh(x @ Wh.T + (r * h) @ Rh.T + Rbh + Wbh)
        h = (1 - z) * c + z * h
        Y[t, 0] = h
    if layout == 1:
        return Y.transpose(2, 0, 1, 3), h[:, None, :]
    return Y, h[None]


def onnx_lstm(X, W, R, B, H):
    T, N, _ = X.shape
    Wi, Wo, Wf, Wc = np.split(W[0], 4)
    Ri, Ro, Rf, Rc = np.split(R[0], 4)
    b = B[0] if B is not None else np.zeros(8 * H)
    bw, br = b[:4 * H], b[4 * H:]
    bi, bo, bf, bc = np.split(bw + br, 4)
    h = np.zeros((N, H))
    c = np.zeros((N, H))
    Y = np.zeros((T, 1, N, H))
    for t in range(T):
        x = X[t]
        i = sig(x @ Wi.T + h @ Ri.T + bi)
        f = sig(x @ Wf.T + h @ Rf.T + bf)
        g = np.tanh(x @ Wc.T + h @ Rc.T + bc)
        o = sig(x @ Wo.T + h @ Ro.T + bo)
        c = f * c + i * g
        h = o * np.tanh(c)
        Y[t, 0] = h
    return Y, h[None], c[None]


def helper_case(case, op, X, H, attrs, bias=True, weights_as_inputs=False, dtype=np.float32):
    rng = np.random.default_rng(zlib.crc32(case.encode()))
    G = 3 if op == "GRU" else 4
    I = X.shape[-1]
    W = rng.uniform(-0.6, 0.6, (1, G * H, I)).astype(np.float32)
    R = rng.uniform(-0.6, 0.6, (1, G * H, H)).astype(np.float32)
    B = rng.uniform(-0.4, 0.4, (1, 2 * G * H)).astype(np.float32) if bias else None
    # Initializers in `dtype` (float16, float64): the expected outputs from the values stored.
    W, R = W.astype(dtype), R.astype(dtype)
    B = B.astype(dtype) if B is not None else None
    layout = attrs.get("layout", 0)
    names = ["X", "W", "R"] + (["B"] if bias else [])
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, names, outs, name="rnn", hidden_size=H, **attrs)
    Xs = list(X.shape)
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, Xs)]
    inits = []
    for n, v in zip(["W", "R", "B"], [W, R, B]):
        if v is None:
            continue
        if weights_as_inputs:
            inputs.append(helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape)))
        else:
            inits.append(numpy_helper.from_array(v, n))
    T, N = (Xs[0], Xs[1]) if layout == 0 else (Xs[1], Xs[0])
    yshape = [T, 1, N, H] if layout == 0 else [N, T, 1, H]
    hshape = [1, N, H] if layout == 0 else [N, 1, H]
    outputs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, yshape),
               helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, hshape)]
    if op == "LSTM":
        outputs.append(helper.make_tensor_value_info("Y_c", TensorProto.FLOAT, hshape))
    graph = helper.make_graph([node], case, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(FILES, case + ".onnx"))
    Xd, Wd, Rd = X.astype(np.float64), W.astype(np.float64), R.astype(np.float64)
    Bd = B.astype(np.float64) if B is not None else None
    if op == "GRU":
        res = onnx_gru(Xd, Wd, Rd, Bd, H, attrs.get("linear_before_reset", 0), layout)
    else:
        res = onnx_lstm(Xd, Wd, Rd, Bd, H)
    arrays = {"X": X}
    if weights_as_inputs:
        arrays.update({"W": W, "R": R})
        if B is not None:
            arrays["B"] = B
    arrays.update(dict(zip(outs, res)))
    save_golden(case, arrays)


def helper_cases():
    rng = np.random.default_rng(5)
    X = rng.uniform(-1, 1, (6, 2, 3)).astype(np.float32)
    helper_case("helper_gru_reset_before", "GRU", X, 5, {})
    helper_case("helper_gru_linear_before_reset", "GRU", X, 5, {"linear_before_reset": 1})
    helper_case("helper_gru_layout1", "GRU", X.transpose(1, 0, 2).copy(), 4,
                {"layout": 1, "linear_before_reset": 1})
    helper_case("helper_gru_no_bias", "GRU", X, 4, {}, bias=False)
    helper_case("helper_lstm", "LSTM", X, 3, {})
    helper_case("helper_lstm_weights_as_inputs", "LSTM", X, 4, {}, weights_as_inputs=True)
    helper_case("helper_gru_float16", "GRU", X, 4, {"linear_before_reset": 1}, dtype=np.float16)
    helper_case("helper_lstm_float64", "LSTM", X, 3, {}, dtype=np.float64)


def hostile_cases():
    """Files grux must refuse with a message naming what is wrong (not checked: some are not
    valid ONNX on purpose)."""
    rng = np.random.default_rng(9)
    X = helper.make_tensor_value_info("X", TensorProto.FLOAT, [4, 1, 3])
    Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)
    w = lambda *s: rng.uniform(-0.5, 0.5, s).astype(np.float32)

    def save(case, nodes, inits, inputs=(X,), outputs=(Y,)):
        g = helper.make_graph(nodes, case, list(inputs), list(outputs), inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
        onnx.save(m, os.path.join(FILES, case + ".onnx"))

    gru = lambda: helper.make_node("GRU", ["X", "W", "R"], ["Y"], name="rnn", hidden_size=5)
    save("bad_w_shape", [gru()], [numpy_helper.from_array(w(1, 12, 3), "W"),
                                  numpy_helper.from_array(w(1, 15, 5), "R")])
    save("bad_missing_initializer", [gru()], [numpy_helper.from_array(w(1, 15, 5), "R")])
    save("bad_unknown_op", [helper.make_node("Conv", ["X", "K"], ["Y"], name="conv")],
         [numpy_helper.from_array(w(3, 3, 1), "K")])
    save("bad_out_of_order", [helper.make_node("Tanh", ["Z"], ["Y"], name="t"),
                              helper.make_node("GRU", ["X", "W", "R"], ["Z"], name="rnn", hidden_size=5)],
         [numpy_helper.from_array(w(1, 15, 3), "W"), numpy_helper.from_array(w(1, 15, 5), "R")])
    ext = numpy_helper.from_array(w(1, 15, 3), "W")
    ext.ClearField("raw_data")
    ext.data_location = TensorProto.EXTERNAL
    e = ext.external_data.add()
    e.key, e.value = "location", "weights.bin"
    save("bad_external_data", [gru()], [ext, numpy_helper.from_array(w(1, 15, 5), "R")])
    big = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[1, 15, 1 << 40])
    save("bad_huge_dims", [gru()], [big, numpy_helper.from_array(w(1, 15, 5), "R")])
    save("bad_clip", [helper.make_node("GRU", ["X", "W", "R"], ["Y"], name="rnn", hidden_size=5, clip=3.0)],
         [numpy_helper.from_array(w(1, 15, 3), "W"), numpy_helper.from_array(w(1, 15, 5), "R")])
    # Softmax before opset 13 flattens from axis 1 by default: over batch and features here.
    g = helper.make_graph(
        [helper.make_node("GRU", ["X", "W", "R"], ["Y"], name="rnn", hidden_size=5),
         helper.make_node("Squeeze", ["Y"], ["S"], name="squeeze", axes=[1]),
         helper.make_node("Softmax", ["S"], ["P"], name="softmax")],
        "bad_softmax_opset11", [X], [helper.make_tensor_value_info("P", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w(1, 15, 3), "W"), numpy_helper.from_array(w(1, 15, 5), "R")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)]),
              os.path.join(FILES, "bad_softmax_opset11.onnx"))
    path = os.path.join(FILES, "bad_bidirectional.onnx")
    torch.onnx.export(torch.nn.GRU(3, 4, bidirectional=True), (torch.randn(5, 1, 3),), path,
                      input_names=["x"], output_names=["y", "h"], opset_version=14)


if __name__ == "__main__":
    os.makedirs(FILES, exist_ok=True)
    os.makedirs(GOLDEN, exist_ok=True)
    torch_cases()
    helper_cases()
    hostile_cases()
