"""The ONNX GRU and LSTM operators (opset 14), written out in numpy float64.

An independent reference for grux's ONNX import: the equations below were written from the
operator specification (https://onnx.ai/onnx/operators/onnx__GRU.html, .../onnx__LSTM.html),
not taken from onnx's or ONNX Runtime's code. Where the specification leaves a point open,
the behaviour of ONNX Runtime's CPU kernels is followed; each such place says so.

    Y, Y_h = onnx_gru(X, W, R, B, sequence_lens, initial_h, hidden_size=..., direction=...,
                      linear_before_reset=0, clip=None, layout=0)
    Y, Y_h, Y_c = onnx_lstm(X, W, R, B, sequence_lens, initial_h, initial_c, P,
                            hidden_size=..., direction=..., clip=None, input_forget=0, layout=0)

Shapes (layout 0; layout 1 swaps the batch and time axes of X, Y and the batch and direction
axes of initial_h/initial_c/Y_h/Y_c):
    X (T, N, I)   W (D, G*H, I)   R (D, G*H, H)   B (D, 2*G*H)   sequence_lens (N,)
    initial_h, initial_c (D, N, H)   P (D, 3*H)   Y (T, D, N, H)   Y_h, Y_c (D, N, H)
G = 3 for GRU (gate blocks z, r, h), 4 for LSTM (i, o, f, c); P = [p_i, p_o, p_f].
D = 2 for "bidirectional" (direction index 0 forward, 1 reverse), else 1.
Only the default activations are modelled (GRU: f = sigmoid, g = tanh; LSTM: f = sigmoid,
g = h = tanh).

Run this file to check it against onnx's own node tests and against the ONNX Runtime test
cases transcribed in onnx/ort_cases.json (next to this file):
    /usr/bin/python3 tests/reference/onnx_equations.py
"""
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ORT_CASES = os.path.join(HERE, "onnx", "ort_cases.json")


# ---------------------------------------------------------------------------------------------
# activations

def sigmoid(x):
    # 1 / (1 + e^-x) written through tanh: same value, and no overflow warning for |x| huge
    # (ORT's tests feed pre-activations of the order of 1e19).
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def tanh(x):
    return np.tanh(x)


# The operators' optional activation lists. The public functions use the defaults only; this
# table exists so that the self-check can also verify the numbers of the ORT cases that name
# other activations (those cases are marked "refused" in the JSON: an importer that supports
# default activations only must refuse them). Entry: (function(x, alpha, beta), default alpha,
# default beta, uses alpha, uses beta). alpha and beta are consumed from activation_alpha and
# activation_beta independently, in the order of the functions that use them (as ORT does).
_ACTIVATIONS = {
    "sigmoid": (lambda x, a, b: sigmoid(x), None, None, False, False),
    "tanh": (lambda x, a, b: np.tanh(x), None, None, False, False),
    "relu": (lambda x, a, b: np.maximum(x, 0.0), None, None, False, False),
    "leakyrelu": (lambda x, a, b: np.where(x >= 0, x, a * x), 0.01, None, True, False),
    "thresholdedrelu": (lambda x, a, b: np.where(x > a, x, 0.0), 1.0, None, True, False),
    "scaledtanh": (lambda x, a, b: a * np.tanh(b * x), 1.0, 1.0, True, True),
    "hardsigmoid": (lambda x, a, b: np.clip(a * x + b, 0.0, 1.0), 0.2, 0.5, True, True),
    "affine": (lambda x, a, b: a * x + b, 1.0, 0.0, True, True),
    "elu": (lambda x, a, b: np.where(x >= 0, x, a * (np.exp(np.minimum(x, 0.0)) - 1.0)), 1.0, None,
            True, False),
    "softsign": (lambda x, a, b: x / (1.0 + np.abs(x)), None, None, False, False),
    "softplus": (lambda x, a, b: np.logaddexp(0.0, x), None, None, False, False),
}


def _activation_functions(names, alphas, betas):
    """[(callable x -> y)] for an ONNX activations attribute and its alpha/beta lists."""
    alphas, betas = list(alphas or []), list(betas or [])
    out = []
    for name in names:
        fn, da, db, uses_a, uses_b = _ACTIVATIONS[name.lower()]
        a = (alphas.pop(0) if alphas else da) if uses_a else None
        b = (betas.pop(0) if betas else db) if uses_b else None
        out.append(lambda x, fn=fn, a=a, b=b: fn(x, a, b))
    return out


# ---------------------------------------------------------------------------------------------
# the shared driver: directions, sequence lengths, layouts

_DIRECTIONS = {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}


def _clip(x, clip):
    # clip bounds a gate's whole pre-activation (inputs, recurrence, biases and, for LSTM, the
    # peephole term) to [-clip, clip]; no clip when the attribute is absent.
    return x if clip is None else np.clip(x, -clip, clip)


def _run(cell, params, X, sequence_lens, states0, direction, layout, empty_sequence_state):
    """Runs `cell` over the batch in every direction.

    cell(params_d, x_t (I,), states (tuple of (H,)), d) -> new states, states[0] being h.
    params: one entry per direction. states0: tuple of (D, N, H) arrays (h, or h and c).
    Returns Y (T, D, N, H) and the tuple of final states, each (D, N, H), in layout 0.
    """
    X = np.asarray(X, dtype=np.float64)
    if layout == 1:
        X = X.transpose(1, 0, 2)                                     # (N, T, I) -> (T, N, I)
    T, N, _ = X.shape
    reverses = _DIRECTIONS[direction]
    D = len(reverses)
    H = states0[0].shape[-1]
    lens = np.full(N, T, dtype=np.int64) if sequence_lens is None else \
        np.asarray(sequence_lens, dtype=np.int64).reshape(N)
    if np.any(lens < 0) or np.any(lens > T):
        raise ValueError(f"sequence_lens {lens.tolist()} outside [0, {T}]")

    Y = np.zeros((T, D, N, H))
    finals = tuple(np.zeros((D, N, H)) for _ in states0)
    for d, reverse in enumerate(reverses):
        for n in range(N):
            L = int(lens[n])
            # A sequence of length L is read at steps 0..L-1 only: forward 0 -> L-1, reverse
            # L-1 -> 0 (the reverse direction starts at the sequence's own last step, not at
            # T-1). Y stays zero at steps >= L.
            steps = range(L - 1, -1, -1) if reverse else range(L)
            states = tuple(s[d, n] for s in states0)
            for t in steps:
                states = cell(params[d], X[t, n], states, d)
                Y[t, d, n] = states[0]
            if L == 0 and empty_sequence_state == "zeros":
                # Not specified by ONNX. ONNX Runtime's CPU GRU and LSTM write zeros to Y_h (and
                # Y_c) for a sequence of length 0, whatever initial_h/initial_c hold (they zero
                # the final state of such rows; with every length 0 they zero all outputs).
                states = tuple(np.zeros(H) for _ in states0)
            for k, s in enumerate(states):
                finals[k][d, n] = s

    if layout == 1:
        Y = Y.transpose(2, 0, 1, 3)                                  # (T, D, N, H) -> (N, T, D, H)
        finals = tuple(f.transpose(1, 0, 2) for f in finals)         # (D, N, H) -> (N, D, H)
    return Y, finals


def _prepare(X, W, R, B, initial_states, hidden_size, direction, layout, gates):
    """float64 copies with defaults filled in; checks the shapes against the attributes."""
    if direction not in _DIRECTIONS:
        raise ValueError(f"direction {direction!r}")
    if layout not in (0, 1):
        raise ValueError(f"layout {layout!r}")
    W = np.asarray(W, dtype=np.float64)
    R = np.asarray(R, dtype=np.float64)
    D = len(_DIRECTIONS[direction])
    H = R.shape[-1] if hidden_size is None else int(hidden_size)
    X = np.asarray(X)
    N = X.shape[1] if layout == 0 else X.shape[0]
    if W.shape[:2] != (D, gates * H) or R.shape != (D, gates * H, H) or W.shape[2] != X.shape[2]:
        raise ValueError(f"W {W.shape} / R {R.shape} do not fit X {X.shape}, D={D}, H={H}")
    B = np.zeros((D, 2 * gates * H)) if B is None else np.asarray(B, dtype=np.float64)
    if B.shape != (D, 2 * gates * H):
        raise ValueError(f"B {B.shape}, expected {(D, 2 * gates * H)}")
    states = []
    for s in initial_states:
        if s is None:
            states.append(np.zeros((D, N, H)))
            continue
        s = np.asarray(s, dtype=np.float64)
        if layout == 1:
            s = s.transpose(1, 0, 2)                                 # (N, D, H) -> (D, N, H)
        if s.shape != (D, N, H):
            raise ValueError(f"initial state {s.shape}, expected {(D, N, H)} (layout 0)")
        states.append(s)
    return X, W, R, B, tuple(states), D, H


# ---------------------------------------------------------------------------------------------
# GRU

def _gru(X, W, R, B, sequence_lens, initial_h, hidden_size, direction, linear_before_reset,
         clip, layout, acts, empty_sequence_state):
    X, W, R, B, states0, D, H = _prepare(X, W, R, B, [initial_h], hidden_size, direction,
                                         layout, 3)
    params = []
    for d in range(D):
        Wz, Wr, Wh = np.split(W[d], 3)                               # each (H, I)
        Rz, Rr, Rh = np.split(R[d], 3)                               # each (H, H)
        Wbz, Wbr, Wbh, Rbz, Rbr, Rbh = np.split(B[d], 6)             # each (H,)
        f, g = acts[2 * d], acts[2 * d + 1]
        params.append((Wz, Wr, Wh, Rz, Rr, Rh, Wbz, Wbr, Wbh, Rbz, Rbr, Rbh, f, g))

    def cell(p, x, states, d):
        Wz, Wr, Wh, Rz, Rr, Rh, Wbz, Wbr, Wbh, Rbz, Rbr, Rbh, f, g = p
        (h,) = states
        z = f(_clip(Wz @ x + Rz @ h + Wbz + Rbz, clip))
        r = f(_clip(Wr @ x + Rr @ h + Wbr + Rbr, clip))
        if linear_before_reset:
            # the reset gate scales the recurrent term after the matrix product, bias Rbh included
            pre = Wh @ x + r * (Rh @ h + Rbh) + Wbh
        else:
            # the reset gate scales the previous state before the matrix product
            pre = Wh @ x + Rh @ (r * h) + Rbh + Wbh
        h_tilde = g(_clip(pre, clip))
        return ((1.0 - z) * h_tilde + z * h,)

    Y, (Y_h,) = _run(cell, params, X, sequence_lens, states0, direction, layout,
                     empty_sequence_state)
    return Y, Y_h


def onnx_gru(X, W, R, B=None, sequence_lens=None, initial_h=None, *, hidden_size=None,
             direction="forward", linear_before_reset=0, clip=None, layout=0,
             empty_sequence_state="zeros"):
    """ONNX GRU (opset 14) with the default activations (sigmoid, tanh). Returns (Y, Y_h).

    hidden_size defaults to R's last axis. clip None: no clip. empty_sequence_state: what Y_h
    holds for a sequence of length 0, "zeros" (ONNX Runtime) or "initial" (initial_h).
    """
    D = len(_DIRECTIONS.get(direction, ()))
    acts = _activation_functions(["Sigmoid", "Tanh"] * D, None, None)
    return _gru(X, W, R, B, sequence_lens, initial_h, hidden_size, direction,
                linear_before_reset, clip, layout, acts, empty_sequence_state)


# ---------------------------------------------------------------------------------------------
# LSTM

def _lstm(X, W, R, B, sequence_lens, initial_h, initial_c, P, hidden_size, direction, clip,
          input_forget, layout, acts, empty_sequence_state):
    X, W, R, B, states0, D, H = _prepare(X, W, R, B, [initial_h, initial_c], hidden_size,
                                         direction, layout, 4)
    P = np.zeros((D, 3 * H)) if P is None else np.asarray(P, dtype=np.float64)
    if P.shape != (D, 3 * H):
        raise ValueError(f"P {P.shape}, expected {(D, 3 * H)}")
    params = []
    for d in range(D):
        Wi, Wo, Wf, Wc = np.split(W[d], 4)                           # each (H, I)
        Ri, Ro, Rf, Rc = np.split(R[d], 4)                           # each (H, H)
        Wbi, Wbo, Wbf, Wbc, Rbi, Rbo, Rbf, Rbc = np.split(B[d], 8)   # each (H,)
        pi, po, pf = np.split(P[d], 3)                               # each (H,)
        f, g, h = acts[3 * d], acts[3 * d + 1], acts[3 * d + 2]
        params.append((Wi, Wo, Wf, Wc, Ri, Ro, Rf, Rc, Wbi + Rbi, Wbo + Rbo, Wbf + Rbf,
                       Wbc + Rbc, pi, po, pf, f, g, h))

    def cell(p, x, states, d):
        Wi, Wo, Wf, Wc, Ri, Ro, Rf, Rc, bi, bo, bf, bc, pi, po, pf, f, g, h = p
        h_prev, c_prev = states
        i = f(_clip(Wi @ x + Ri @ h_prev + pi * c_prev + bi, clip))
        if input_forget:
            # The spec only says "couple the input and forget gates"; ONNX Runtime computes the
            # forget gate as 1 - i (and then ignores W_f, R_f, the f biases and p_f).
            fg = 1.0 - i
        else:
            fg = f(_clip(Wf @ x + Rf @ h_prev + pf * c_prev + bf, clip))
        c_tilde = g(_clip(Wc @ x + Rc @ h_prev + bc, clip))
        c = fg * c_prev + i * c_tilde
        # the output gate's peephole looks at the NEW cell state c_t (the spec's "Ct")
        o = f(_clip(Wo @ x + Ro @ h_prev + po * c + bo, clip))
        # the cell state itself is not clipped
        return o * h(c), c

    Y, (Y_h, Y_c) = _run(cell, params, X, sequence_lens, states0, direction, layout,
                         empty_sequence_state)
    return Y, Y_h, Y_c


def onnx_lstm(X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, *,
              hidden_size=None, direction="forward", clip=None, input_forget=0, layout=0,
              empty_sequence_state="zeros"):
    """ONNX LSTM (opset 14) with the default activations (sigmoid, tanh, tanh).

    Returns (Y, Y_h, Y_c). hidden_size defaults to R's last axis. clip None: no clip.
    empty_sequence_state: what Y_h / Y_c hold for a sequence of length 0, "zeros" (ONNX
    Runtime) or "initial" (initial_h / initial_c).
    """
    D = len(_DIRECTIONS.get(direction, ()))
    acts = _activation_functions(["Sigmoid", "Tanh", "Tanh"] * D, None, None)
    return _lstm(X, W, R, B, sequence_lens, initial_h, initial_c, P, hidden_size, direction,
                 clip, input_forget, layout, acts, empty_sequence_state)


# ---------------------------------------------------------------------------------------------
# self-check

def _node_attributes(node):
    import onnx.helper
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _decode(v):
    return v.decode() if isinstance(v, bytes) else v


def _run_node(op, attrs, inputs, activations=None, alphas=None, betas=None):
    """Evaluates one GRU/LSTM node: attrs as in ONNX, inputs {name: ndarray} (absent = None).

    Returns {output name: ndarray}. activations/alphas/betas: an explicit activations list
    (used by the self-check for the ORT cases that name other activations).
    """
    direction = _decode(attrs.get("direction", "forward"))
    D = len(_DIRECTIONS[direction])
    G = {"GRU": 3, "LSTM": 4}[op]
    names = [_decode(a) for a in (activations or [])] or \
        (["Sigmoid", "Tanh"] if op == "GRU" else ["Sigmoid", "Tanh", "Tanh"]) * D
    if len(names) != (G - 1) * D:
        raise ValueError(f"{op}: {len(names)} activations for {D} direction(s)")
    acts = _activation_functions(names, alphas, betas)
    common = dict(hidden_size=attrs.get("hidden_size"), direction=direction,
                  clip=attrs.get("clip"), layout=int(attrs.get("layout", 0)),
                  empty_sequence_state="zeros")
    get = inputs.get
    if op == "GRU":
        Y, Y_h = _gru(get("X"), get("W"), get("R"), get("B"), get("sequence_lens"),
                      get("initial_h"), acts=acts,
                      linear_before_reset=int(attrs.get("linear_before_reset", 0)), **common)
        return {"Y": Y, "Y_h": Y_h}
    Y, Y_h, Y_c = _lstm(get("X"), get("W"), get("R"), get("B"), get("sequence_lens"),
                        get("initial_h"), get("initial_c"), get("P"), acts=acts,
                        input_forget=int(attrs.get("input_forget", 0)), **common)
    return {"Y": Y, "Y_h": Y_h, "Y_c": Y_c}


ONNX_INPUTS = {"GRU": ["X", "W", "R", "B", "sequence_lens", "initial_h"],
               "LSTM": ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]}
ONNX_OUTPUTS = {"GRU": ["Y", "Y_h"], "LSTM": ["Y", "Y_h", "Y_c"]}


def _onnx_node_cases():
    """Every GRU/LSTM case of onnx's node tests: [(name, op, attrs, inputs, expected)]."""
    import onnx.backend.test.case.node.gru as gru_mod
    import onnx.backend.test.case.node.lstm as lstm_mod

    cases = []
    for mod, cls_name in ((gru_mod, "GRU"), (lstm_mod, "LSTM")):
        captured = []

        def capture(node, inputs, outputs, name, **kwargs):
            captured.append((node, inputs, outputs, name))

        saved = mod.expect
        mod.expect = capture
        try:
            cls = getattr(mod, cls_name)
            for attr in sorted(dir(cls)):
                if attr.startswith("export"):
                    getattr(cls, attr)()
        finally:
            mod.expect = saved
        for node, ins, outs, name in captured:
            # the node's inputs/outputs are positional; '' marks an omitted optional one
            slots = ONNX_INPUTS[node.op_type]
            inputs = {}
            it = iter(ins)
            for k, n in enumerate(node.input):
                if n:
                    inputs[slots[k]] = np.asarray(next(it))
            expected = {}
            it = iter(outs)
            for k, n in enumerate(node.output):
                if n:
                    expected[ONNX_OUTPUTS[node.op_type][k]] = np.asarray(next(it))
            cases.append((name, node.op_type, _node_attributes(node), inputs, expected))
    return cases


def _ort_cases(path=ORT_CASES):
    with open(path) as fh:
        doc = json.load(fh)
    cases = []
    for c in doc["cases"]:
        ins = {}
        for k, v in c["inputs"].items():
            ins[k] = np.array(v["data"], dtype=np.int64 if k == "sequence_lens" else np.float32) \
                .reshape(v["shape"])
        exp = {k: np.array(v["data"], dtype=np.float64).reshape(v["shape"])
               for k, v in c["outputs"].items()}
        cases.append((c, ins, exp))
    return cases


# ORT's CPU operator tests compare float outputs with this absolute tolerance (and nothing
# else); elements listed under "disagreeing_elements" of an ORT case are held to it only.
ORT_TEST_ATOL = 1e-4


def _compare(got, expected, atol, rtol, loose=()):
    """max |got - expected| over the expected outputs, and whether all are within tolerance.

    loose: [(output name, index)] of elements checked against ORT_TEST_ATOL instead.
    Returns (max error over the other elements, max error over the loose ones, all within).
    """
    worst, worst_loose, ok = 0.0, 0.0, True
    for k, e in expected.items():
        g = got[k]
        if g.shape != e.shape:
            return float("inf"), float("inf"), False
        err = np.abs(g - e)
        bound = atol + rtol * np.abs(e)
        strict = np.ones(e.shape, dtype=bool)
        for name, index in loose:
            if name == k:
                bound[tuple(index)] = ORT_TEST_ATOL
                strict[tuple(index)] = False
        worst = max(worst, float(err[strict].max(initial=0.0)))
        worst_loose = max(worst_loose, float(err[~strict].max(initial=0.0)))
        ok &= bool(np.all(err <= bound))
    return worst, worst_loose, ok


def main():
    # ORT's expected numbers are printed with 6 to 8 significant digits (some with 5), and
    # onnx's are float32 results: a tolerance of 1e-5 absolute + 1e-4 relative.
    atol, rtol = 1e-5, 1e-4
    failures = []

    print(f"onnx node tests (tolerance {atol:g} + {rtol:g}*|expected|):")
    node_cases = _onnx_node_cases()
    for name, op, attrs, inputs, expected in node_cases:
        got = _run_node(op, attrs, inputs, attrs.get("activations"),
                        attrs.get("activation_alpha"), attrs.get("activation_beta"))
        worst, _, ok = _compare(got, expected, atol, rtol)
        print(f"  {'ok  ' if ok else 'FAIL'} {name:40s} {op:4s} max abs err {worst:.2e}")
        if not ok:
            failures.append(name)

    ort = _ort_cases()
    print(f"ONNX Runtime cases from {os.path.relpath(ORT_CASES, HERE)} "
          f"(tolerance {atol:g} + {rtol:g}*|expected|):")
    worst_all = 0.0
    for c, inputs, expected in ort:
        attrs = c["attributes"]
        got = _run_node(c["op"], attrs, inputs, attrs.get("activations"),
                        attrs.get("activation_alpha"), attrs.get("activation_beta"))
        loose = c.get("disagreeing_elements", [])
        worst, worst_loose, ok = _compare(got, expected, atol, rtol, loose)
        worst_all = max(worst_all, worst)
        tag = " (refused: non-default activations)" if c.get("refused") else ""
        if c.get("disagrees"):
            # a number of the ORT source that the rest of its case contradicts (see "reason")
            tag += (f" (disagrees at {loose}: err {worst_loose:.2e} there, held to ORT's own "
                    f"{ORT_TEST_ATOL:g})")
        print(f"  {'ok  ' if ok else 'FAIL'} {c['name']:80s} {c['op']:4s} "
              f"max abs err {worst:.2e}{tag}")
        if not ok:
            failures.append(c["name"])

    print(f"{len(node_cases)} onnx node cases, {len(ort)} ORT cases "
          f"(max abs err over ORT cases {worst_all:.2e}, disagreeing elements aside); "
          f"{len(failures)} failure(s){': ' + ', '.join(failures) if failures else ''}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
