"""Writes the ONNX test files of tests/test_onnx.cpp and their expected outputs.

files/<case>.onnx: torch.onnx.export (Debian's python3-torch) of nn.GRU / nn.LSTM models;
graphs built with onnx.helper for what torch does not write (linear_before_reset 0, layout 1,
reverse, clip, peepholes, input_forget, sequence_lens, weights as graph inputs); the cases of
ONNX's own node tests for GRU and LSTM (onnx 1.12's generator, onnx.backend.test.case.node,
run here with its `expect` captured); and ONNX Runtime's GRU and LSTM operator tests, from
the numbers transcribed into onnx/ort_cases.json. golden/<case>.<name>.npy: every graph input
and output. For the torch files the expected outputs are PyTorch's, in float64 (the model cast
to double), rounded to f32; for the helper graphs the ONNX equations of onnx_equations.py,
written from the operator's specification, in float64; for the node tests and ONNX Runtime's,
their own expected numbers. Every file passes onnx.checker. cases.txt lists each case: its
name, its frames input, the inputs given with it and its outputs.

Run: /usr/bin/python3 tests/reference/gen_onnx_models.py (deterministic: seeded weights).
"""
import os
import zlib

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

import json

from onnx_equations import onnx_gru as eq_gru, onnx_lstm as eq_lstm

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = os.path.join(HERE, "onnx", "files")
GOLDEN = os.path.join(HERE, "onnx", "golden")


CASES = []  # (name, frames input, given inputs, outputs) for cases.txt


def save_golden(case, arrays):
    for name, a in arrays.items():
        a = np.asarray(a)
        a = a.astype(np.int64) if a.dtype.kind in "iub" else a.astype(np.float32)
        np.save(os.path.join(GOLDEN, f"{case}.{name}.npy"), a)


def listed(case, frames, given, outputs):
    CASES.append((case, frames, list(given), list(outputs)))


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
    listed(case, input_names[0], [], output_names)


def export_with_states(case, rnn, x, states):
    """An nn.GRU / nn.LSTM called with its initial states, which become graph inputs (given with
    the frames: torch writes a Slice of them for each layer)."""
    torch.manual_seed(0)
    path = os.path.join(FILES, case + ".onnx")
    rnn.eval()
    lstm = isinstance(rnn, torch.nn.LSTM)
    names = ["x", "h0", "c0"][:len(states) + 1]
    outs = ["y", "h"] + (["c"] if lstm else [])
    arg = (x, tuple(states)) if lstm else (x, states[0])
    torch.onnx.export(rnn, arg, path, input_names=names, output_names=outs, opset_version=14)
    onnx.checker.check_model(onnx.load(path))
    with torch.no_grad():
        rd = rnn.double()
        y, h = rd(x.double(), tuple(s.double() for s in states) if lstm else states[0].double())
    flat = [y] + (list(h) if lstm else [h])
    arrays = dict(zip(names, [x.numpy()] + [s.numpy() for s in states]))
    arrays.update({n: o.numpy() for n, o in zip(outs, flat)})
    save_golden(case, arrays)
    listed(case, "x", names[1:], outs)


class Head(torch.nn.Module):
    """A recurrent stack and a Linear head; optional tanh, last step, skip."""

    def __init__(self, rnn, out, act=None, last=False, skip=False):
        super().__init__()
        width = rnn.hidden_size * (2 if rnn.bidirectional else 1)
        self.rnn, self.lin, self.act, self.last, self.skip = rnn, torch.nn.Linear(width, out), act, last, skip

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
    export("torch_gru_bidirectional_2layers", torch.nn.GRU(3, 4, num_layers=2, bidirectional=True),
           torch.randn(6, 2, 3), ["x"], ["y", "h"], {"x": {0: "T", 1: "N"}})
    export("torch_lstm_bidirectional_head_batch_first",
           Head(torch.nn.LSTM(2, 5, bidirectional=True, batch_first=True), 2),
           torch.randn(3, 7, 2), ["x"], ["out"], bf)
    export("torch_lstm_bidirectional_2layers", torch.nn.LSTM(3, 4, num_layers=2, bidirectional=True),
           torch.randn(5, 2, 3), ["x"], ["y", "h", "c"], {"x": {0: "T", 1: "N"}})
    export_with_states("torch_gru_2layers_h0", torch.nn.GRU(3, 5, num_layers=2),
                       torch.randn(6, 3, 3), [torch.randn(2, 3, 5)])
    export_with_states("torch_lstm_bidirectional_h0_c0", torch.nn.LSTM(2, 4, bidirectional=True),
                       torch.randn(5, 2, 2), [torch.randn(2, 2, 4), torch.randn(2, 2, 4)])


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


def helper_case(case, op, X, H, attrs, bias=True, weights_as_inputs=False, dtype=np.float32,
                run_inputs=None):
    """run_inputs: sequence_lens, initial_h, initial_c or P as graph inputs given with the
    frames (name: value)."""
    rng = np.random.default_rng(zlib.crc32(case.encode()))
    G = 3 if op == "GRU" else 4
    I = X.shape[-1]
    D = 2 if attrs.get("direction") == "bidirectional" else 1
    W = rng.uniform(-0.6, 0.6, (D, G * H, I)).astype(np.float32)
    R = rng.uniform(-0.6, 0.6, (D, G * H, H)).astype(np.float32)
    B = rng.uniform(-0.4, 0.4, (D, 2 * G * H)).astype(np.float32) if bias else None
    run_inputs = run_inputs or {}
    # Initializers in `dtype` (float16, float64): the expected outputs from the values stored.
    W, R = W.astype(dtype), R.astype(dtype)
    B = B.astype(dtype) if B is not None else None
    layout = attrs.get("layout", 0)
    names = ["X", "W", "R"] + (["B"] if bias else [""])
    order = ["sequence_lens", "initial_h", "initial_c", "P"]
    last = max([order.index(k) + 1 for k in run_inputs] + [0])
    names += [k if k in run_inputs else "" for k in order[:last]]
    while names[-1] == "":
        names.pop()
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
    for n, v in run_inputs.items():
        t = TensorProto.INT32 if n == "sequence_lens" else TensorProto.FLOAT
        inputs.append(helper.make_tensor_value_info(n, t, list(v.shape)))
    T, N = (Xs[0], Xs[1]) if layout == 0 else (Xs[1], Xs[0])
    yshape = [T, D, N, H] if layout == 0 else [N, T, D, H]
    hshape = [D, N, H] if layout == 0 else [N, D, H]
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
    if op == "GRU" and not run_inputs and D == 1 and "direction" not in attrs and "clip" not in attrs:
        # The equations of this file, and those of onnx_equations.py for the other options.
        res = onnx_gru(Xd, Wd, Rd, Bd, H, attrs.get("linear_before_reset", 0), layout)
    elif op == "LSTM" and not run_inputs and D == 1 and not attrs:
        res = onnx_lstm(Xd, Wd, Rd, Bd, H)
    else:
        kw = {k: v.astype(np.float64) if k != "sequence_lens" else v for k, v in run_inputs.items()}
        eq = eq_gru if op == "GRU" else eq_lstm
        res = eq(Xd, Wd, Rd, B=Bd, hidden_size=H, **kw,
                 **{k: v for k, v in attrs.items() if k != "activations"})
    arrays = {"X": X}
    given = []
    if weights_as_inputs:
        arrays.update({"W": W, "R": R})
        given += ["W", "R"]
        if B is not None:
            arrays["B"] = B
            given.append("B")
    arrays.update(run_inputs)
    given += list(run_inputs)
    arrays.update(dict(zip(outs, res)))
    save_golden(case, arrays)
    listed(case, "X", given, outs)


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
    # What torch does not write, against onnx_equations.py.
    lens = np.array([6, 4], dtype=np.int32)
    h0 = lambda D, N, H: rng.uniform(-0.5, 0.5, (D, N, H)).astype(np.float32)
    helper_case("helper_gru_reverse", "GRU", X, 4, {"direction": "reverse", "linear_before_reset": 1})
    # The default activations written out, once for each direction.
    helper_case("helper_gru_bidirectional_reset_before", "GRU", X, 3,
                {"direction": "bidirectional", "activations": ["Sigmoid", "Tanh", "Sigmoid", "Tanh"]})
    helper_case("helper_gru_clip", "GRU", X * 4, 4, {"clip": 0.7, "linear_before_reset": 1})
    helper_case("helper_gru_sequence_lens_h0", "GRU", X, 4, {"direction": "bidirectional"},
                run_inputs={"sequence_lens": lens, "initial_h": h0(2, 2, 4)})
    helper_case("helper_gru_layout1_bidirectional", "GRU", X.transpose(1, 0, 2).copy(), 3,
                {"layout": 1, "direction": "bidirectional", "linear_before_reset": 1})
    helper_case("helper_lstm_reverse", "LSTM", X, 3, {"direction": "reverse"})
    helper_case("helper_lstm_bidirectional_lens_states", "LSTM", X, 3, {"direction": "bidirectional"},
                run_inputs={"sequence_lens": np.array([3, 6], dtype=np.int32),
                            "initial_h": h0(2, 2, 3), "initial_c": h0(2, 2, 3)})
    helper_case("helper_lstm_peepholes", "LSTM", X, 4, {},
                run_inputs={"P": rng.uniform(-0.5, 0.5, (1, 12)).astype(np.float32)})
    helper_case("helper_lstm_clip_input_forget", "LSTM", X * 4, 3, {"clip": 0.9, "input_forget": 1})
    helper_case("helper_lstm_zero_length", "LSTM", X, 3, {},
                run_inputs={"sequence_lens": np.array([0, 5], dtype=np.int32),
                            "initial_h": h0(1, 2, 3), "initial_c": h0(1, 2, 3)})
    # Layout 1: states given as [batch, directions, hidden].
    helper_case("helper_lstm_layout1_states_lens", "LSTM", X.transpose(1, 0, 2).copy(), 3,
                {"layout": 1, "direction": "bidirectional"},
                run_inputs={"sequence_lens": np.array([5, 2], dtype=np.int32),
                            "initial_h": h0(2, 2, 3).transpose(1, 0, 2).copy(),
                            "initial_c": h0(2, 2, 3).transpose(1, 0, 2).copy()})
    helper_case("helper_lstm_layout1_peepholes_bidirectional", "LSTM", X.transpose(1, 0, 2).copy(), 3,
                {"layout": 1, "direction": "bidirectional"},
                run_inputs={"P": rng.uniform(-0.5, 0.5, (2, 9)).astype(np.float32)})


def tf2onnx_cases():
    """Graphs laid out as tf2onnx writes a Keras Sequential model (as far as its converter's
    documentation and source describe it): the batch-major input transposed to time-major, a GRU
    (Keras' reset_after: linear_before_reset 1) or LSTM node, its Y_h squeezed or its Y squeezed
    and transposed back, then a Dense as MatMul + Add. Expected outputs from onnx_equations.py."""
    rng = np.random.default_rng(13)
    N, T, I, H, O = 2, 7, 3, 5, 2
    x = rng.uniform(-1, 1, (N, T, I)).astype(np.float32)
    for case, op, sequences in (("tf2onnx_gru_last_state_dense", "GRU", False),
                                ("tf2onnx_lstm_sequences_dense_tanh", "LSTM", True)):
        G = 3 if op == "GRU" else 4
        W = rng.uniform(-0.6, 0.6, (1, G * H, I)).astype(np.float32)
        R = rng.uniform(-0.6, 0.6, (1, G * H, H)).astype(np.float32)
        B = rng.uniform(-0.4, 0.4, (1, 2 * G * H)).astype(np.float32)
        K = rng.uniform(-0.6, 0.6, (H, O)).astype(np.float32)
        b = rng.uniform(-0.3, 0.3, (O,)).astype(np.float32)
        attrs = {"linear_before_reset": 1} if op == "GRU" else {}
        outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
        nodes = [helper.make_node("Transpose", ["x"], ["xt"], name="transpose", perm=[1, 0, 2]),
                 helper.make_node(op, ["xt", "W", "R", "B"], [o + "_" for o in outs], name="rnn",
                                  hidden_size=H, **attrs)]
        inits = [numpy_helper.from_array(v, n) for n, v in
                 (("W", W), ("R", R), ("B", B), ("K", K), ("b", b))]
        inits.append(numpy_helper.from_array(np.array([0], np.int64), "axis0"))
        inits.append(numpy_helper.from_array(np.array([1], np.int64), "axis1"))
        if sequences:
            nodes += [helper.make_node("Squeeze", ["Y_", "axis1"], ["ys"], name="squeeze"),
                      helper.make_node("Transpose", ["ys"], ["yb"], name="back", perm=[1, 0, 2])]
            last = "yb"
        else:
            nodes += [helper.make_node("Squeeze", ["Y_h_", "axis0"], ["hs"], name="squeeze")]
            last = "hs"
        nodes += [helper.make_node("MatMul", [last, "K"], ["mm"], name="dense/MatMul"),
                  helper.make_node("Add", ["mm", "b"], ["dense"] if not sequences else ["pre"],
                                   name="dense/BiasAdd")]
        if sequences:
            nodes.append(helper.make_node("Tanh", ["pre"], ["dense"], name="dense/Tanh"))
        shape = [N, T, O] if sequences else [N, O]
        g = helper.make_graph(nodes, case, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", T, I])],
                              [helper.make_tensor_value_info("dense", TensorProto.FLOAT, shape)], inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
        onnx.checker.check_model(m)
        onnx.save(m, os.path.join(FILES, case + ".onnx"))
        X = x.transpose(1, 0, 2).astype(np.float64)
        eq = eq_gru if op == "GRU" else eq_lstm
        res = eq(X, W.astype(np.float64), R.astype(np.float64), B=B.astype(np.float64),
                 hidden_size=H, **attrs)
        if sequences:
            y = np.tanh(res[0][:, 0].transpose(1, 0, 2) @ K + b)
        else:
            y = res[1][0] @ K + b
        save_golden(case, {"x": x, "dense": y})
        listed(case, "x", [], ["dense"])


def graph_case(case, node, arrays, outputs):
    """One node's graph, every input a graph input (as ONNX's node tests give them), saved with
    the values and the expected outputs."""
    inputs = []
    for name, a in arrays.items():
        t = helper.np_dtype_to_tensor_dtype(a.dtype) if hasattr(helper, "np_dtype_to_tensor_dtype") \
            else onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[a.dtype]
        inputs.append(helper.make_tensor_value_info(name, t, list(a.shape)))
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape)) for n, v in outputs.items()]
    g = helper.make_graph([node], case, inputs, outs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    onnx.checker.check_model(m)
    onnx.save(m, os.path.join(FILES, case + ".onnx"))
    save_golden(case, {**arrays, **outputs})
    names = list(arrays)
    listed(case, names[0], names[1:], list(outputs))


def node_test_cases():
    """ONNX's own node tests for GRU and LSTM: onnx 1.12's generator run with its `expect`
    captured, each case saved as a graph of its node and its expected outputs."""
    from onnx.backend.test.case.node import gru as node_gru, lstm as node_lstm

    def capture(node, inputs, outputs, name):
        arrays = {n: a for n, a in zip(node.input, inputs) if n}
        outs = {n: a for n, a in zip([o for o in node.output if o], outputs)}
        graph_case("node_" + name[len("test_"):], node, arrays, outs)

    for module, cls in ((node_gru, node_gru.GRU), (node_lstm, node_lstm.LSTM)):
        module.expect = capture
        np.random.seed(0)  # the seq_length case draws its weights
        for attr in sorted(dir(cls)):
            if attr.startswith("export"):
                getattr(cls, attr)()


def ort_cases():
    """ONNX Runtime's GRU and LSTM operator tests (onnx/ort_cases.json: their inputs and
    expected outputs, transcribed from the test sources it names)."""
    with open(os.path.join(HERE, "onnx", "ort_cases.json")) as f:
        data = json.load(f)
    for c in data["cases"]:
        if c.get("disagrees"):
            continue
        name = "ort_" + c["name"].replace(".", "_").replace("#", "_")
        arrays = {}
        for k in ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]:
            if k in c["inputs"]:
                v = c["inputs"][k]
                dtype = np.int32 if k == "sequence_lens" else np.float32
                arrays[k] = np.array(v["data"], dtype=dtype).reshape(v["shape"])
        attrs = {k: v for k, v in c["attributes"].items() if v is not None}
        node_inputs = [k if k in arrays else "" for k in
                       ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]]
        while node_inputs[-1] == "":
            node_inputs.pop()
        if c["op"] == "GRU":
            node_inputs = node_inputs[:6]
        all_outs = ["Y", "Y_h"] + (["Y_c"] if c["op"] == "LSTM" else [])
        node_outputs = [o if o in c["outputs"] else "" for o in all_outs]
        while node_outputs[-1] == "":
            node_outputs.pop()
        node = helper.make_node(c["op"], node_inputs, node_outputs, name="rnn", **attrs)
        outs = {o: np.array(c["outputs"][o]["data"], dtype=np.float32).reshape(c["outputs"][o]["shape"])
                for o in all_outs if o in c["outputs"]}
        if c.get("refused"):
            # Other activations than the defaults: a file grux must refuse, naming them.
            g = helper.make_graph(
                [node], name, [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(arrays["X"].shape))],
                [helper.make_tensor_value_info(o, TensorProto.FLOAT, list(v.shape)) for o, v in outs.items()],
                [numpy_helper.from_array(v, k) for k, v in arrays.items() if k != "X"])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
            onnx.checker.check_model(m)
            onnx.save(m, os.path.join(FILES, "refused_" + name + ".onnx"))
            continue
        graph_case(name, node, arrays, outs)


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
    save("bad_clip", [helper.make_node("GRU", ["X", "W", "R"], ["Y"], name="rnn", hidden_size=5, clip=-3.0)],
         [numpy_helper.from_array(w(1, 15, 3), "W"), numpy_helper.from_array(w(1, 15, 5), "R")])
    save("bad_activations", [helper.make_node("GRU", ["X", "W", "R"], ["Y"], name="rnn", hidden_size=5,
                                              activations=["Relu", "Tanh"])],
         [numpy_helper.from_array(w(1, 15, 3), "W"), numpy_helper.from_array(w(1, 15, 5), "R")])
    save("bad_direction", [helper.make_node("GRU", ["X", "W", "R"], ["Y"], name="rnn", hidden_size=5,
                                            direction="sideways")],
         [numpy_helper.from_array(w(1, 15, 3), "W"), numpy_helper.from_array(w(1, 15, 5), "R")])
    # A bidirectional node whose W is one direction's.
    save("bad_bidirectional_w", [helper.make_node("GRU", ["X", "W", "R"], ["Y"], name="rnn", hidden_size=5,
                                                  direction="bidirectional")],
         [numpy_helper.from_array(w(1, 15, 3), "W"), numpy_helper.from_array(w(2, 15, 5), "R")])
    # Softmax before opset 13 flattens from axis 1 by default: over batch and features here.
    g = helper.make_graph(
        [helper.make_node("GRU", ["X", "W", "R"], ["Y"], name="rnn", hidden_size=5),
         helper.make_node("Squeeze", ["Y"], ["S"], name="squeeze", axes=[1]),
         helper.make_node("Softmax", ["S"], ["P"], name="softmax")],
        "bad_softmax_opset11", [X], [helper.make_tensor_value_info("P", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w(1, 15, 3), "W"), numpy_helper.from_array(w(1, 15, 5), "R")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)]),
              os.path.join(FILES, "bad_softmax_opset11.onnx"))
    # A cycle: each node reads the other's output.
    save("bad_cycle", [helper.make_node("Tanh", ["B"], ["A"], name="t1"),
                       helper.make_node("Tanh", ["A"], ["B"], name="t2")], [], outputs=[
        helper.make_tensor_value_info("A", TensorProto.FLOAT, None)])
    # A zero state whose size, built from the frames' Shape, disagrees with hidden_size.
    Xd = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["T", "N", 3])
    save("bad_state_size", [
        helper.make_node("Shape", ["X"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "one"], ["n"], name="batch", axis=0),
        helper.make_node("Concat", ["d", "n", "h"], ["hs"], name="concat", axis=0),
        helper.make_node("ConstantOfShape", ["hs"], ["h0"], name="zeros"),
        helper.make_node("GRU", ["X", "W", "R", "", "", "h0"], ["Y"], name="rnn", hidden_size=5)],
        [numpy_helper.from_array(w(1, 15, 3), "W"), numpy_helper.from_array(w(1, 15, 5), "R"),
         numpy_helper.from_array(np.array([1], np.int64), "one"),
         numpy_helper.from_array(np.array([1], np.int64), "d"),
         numpy_helper.from_array(np.array([7], np.int64), "h")], inputs=(Xd,))
    # Sizes that disagree: the GRU's features reshaped to another count.
    save("bad_reshape_sizes", [
        helper.make_node("GRU", ["X", "W", "R"], ["Y"], name="rnn", hidden_size=5),
        helper.make_node("Reshape", ["Y", "shape"], ["Z"], name="reshape")],
        [numpy_helper.from_array(w(1, 15, 3), "W"), numpy_helper.from_array(w(1, 15, 5), "R"),
         numpy_helper.from_array(np.array([0, 0, 0, 4], np.int64), "shape")], inputs=(Xd,))
    # A bidirectional layer's output fed to a Linear without joining its two directions.
    g = helper.make_graph(
        [helper.make_node("GRU", ["X", "W", "R"], ["Y"], name="rnn", hidden_size=5, direction="bidirectional"),
         helper.make_node("MatMul", ["Y", "K"], ["P"], name="head")],
        "bad_directions_apart", [X], [helper.make_tensor_value_info("P", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w(2, 15, 3), "W"), numpy_helper.from_array(w(2, 15, 5), "R"),
         numpy_helper.from_array(w(5, 2), "K")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]),
              os.path.join(FILES, "bad_directions_apart.onnx"))


if __name__ == "__main__":
    os.makedirs(FILES, exist_ok=True)
    os.makedirs(GOLDEN, exist_ok=True)
    for old in os.listdir(FILES):
        os.remove(os.path.join(FILES, old))
    for old in os.listdir(GOLDEN):
        os.remove(os.path.join(GOLDEN, old))
    torch_cases()
    helper_cases()
    tf2onnx_cases()
    node_test_cases()
    ort_cases()
    hostile_cases()
    with open(os.path.join(HERE, "onnx", "cases.txt"), "w") as f:
        f.write("# case frames-input given-inputs(,) outputs(,): written by gen_onnx_models.py\n")
        for name, frames, given, outs in CASES:
            f.write(f"{name} {frames} {','.join(given) or '-'} {','.join(outs)}\n")
