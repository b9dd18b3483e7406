# Golden-file generator: PyTorch nn.LSTM / nn.LSTMCell forward results and autograd gradients
# for a fixed list of small cases, written as safetensors files into
# tests/reference/golden/lstm/.
"""Regenerate with:  /usr/bin/python3 tests/reference/gen_lstm_golden.py

Needs Debian's python3-torch and python3-numpy. Output is deterministic: running the script
twice gives byte-identical files. Each case's forward pass is also computed by an independent
numpy implementation of the LSTM equations below (in f64, from the same weights and inputs),
and the script stops if the two disagree. Format as gen_gru_golden.py's
(tests/reference/README.md): tensors input, h0, c0, lengths, output, h_n, c_n, grad_output,
grad_h_n, grad_c_n, grad.input, grad.h0, grad.c0, w.<key>, grad.<key>; metadata "config".
"""

import hashlib
import json
import os
import sys

import numpy as np
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gen_gru_golden import safetensors_bytes  # noqa: E402

OUT_DIR = os.path.join(HERE, "golden", "lstm")


def C(name, **kw):
    """A case description with defaults filled in."""
    c = dict(
        name=name, kind="lstm", T=5, N=3, I=4, H=6, P=0, L=1, bias=True, bf=False, bidir=False,
        unbatched=False, h0=True, c0=True, lengths=None, grad_of=("output", "h_n", "c_n"),
        dtype="f32", wscale=1.0, xscale=1.0, note="",
    )
    c.update(kw)
    return c


def both(name, **kw):
    """The same case in f32 and f64."""
    return [C(f"{name}_f32", dtype="f32", **kw), C(f"{name}_f64", dtype="f64", **kw)]


CASES = [
    *both("lstm_basic", note="basic: 1 layer, h0 and c0 given, grads of output, h_n, c_n"),
    *both("lstm_noh0_noc0", h0=False, c0=False, note="no initial state (zeros)"),
    *both("lstm_h0_only", c0=False, note="h0 given, c0 zeros"),
    *both("lstm_c0_only", h0=False, note="c0 given, h0 zeros"),
    *both("lstm_size1", T=1, N=1, I=1, H=1, note="every size 1"),
    *both("lstm_primes_T7_N5_I13_H11", T=7, N=5, I=13, H=11, note="prime sizes"),
    *both("lstm_H17_I19", T=4, N=3, I=19, H=17, note="SIMD-width tail: H=17"),
    *both("lstm_H33_I19", T=4, N=3, I=19, H=33, note="SIMD-width tail: H=33"),
    *both("lstm_H16", T=4, N=2, I=16, H=16, note="H=16 (exact SIMD width)"),
    *both("lstm_l2", L=2, note="2 layers"),
    *both("lstm_l3_noh0", L=3, T=4, h0=False, c0=False, note="3 layers, no initial state"),
    *both("lstm_bidir", bidir=True, note="bidirectional"),
    *both("lstm_bf", bf=True, note="batch_first"),
    *both("lstm_nobias", bias=False, note="bias=False"),
    *both("lstm_proj", H=7, P=3, note="proj_size 3 of hidden 7"),
    *both("lstm_proj_H20_P17", H=20, P=17, T=3, note="proj_size 17 of hidden 20 (SIMD tails)"),
    *both("lstm_proj_l2_bidir_lengths_bf", T=6, N=4, L=2, H=7, P=4, bidir=True, bf=True,
          lengths=[4, 6, 1, 3], note="proj + 2 layers + bidirectional + lengths + batch_first"),
    *both("lstm_proj_nobias_noh0", H=6, P=2, bias=False, h0=False,
          note="proj + bias=False, c0 only"),
    *both("lstm_lengths", T=6, N=4, lengths=[3, 6, 1, 5], h0=False, c0=False,
          note="variable lengths (packed, enforce_sorted=False), no initial state"),
    *both("lstm_lengths_h0_c0", T=6, N=4, lengths=[3, 6, 1, 5], note="lengths with h0, c0"),
    *both("lstm_l2_bidir_lengths_bf_h0", T=6, N=4, L=2, bidir=True, bf=True,
          lengths=[4, 6, 1, 3], note="2 layers + bidirectional + lengths + batch_first + h0"),
    *both("lstm_nobias_bidir_lengths", T=5, N=3, bias=False, bidir=True, lengths=[2, 5, 1],
          h0=False, note="bias=False + bidirectional + lengths, c0 only"),
    *both("lstm_long_T300", T=300, N=2, I=3, H=5, note="long sequence T=300"),
    *both("lstm_sat_x50_w5", xscale=50.0, wscale=5.0,
          note="saturated gates: input = randn*50, weights and biases x5"),
    *both("lstm_sat_l2_bidir_lengths_proj", L=2, bidir=True, T=5, N=3, H=6, P=3,
          lengths=[1, 5, 3], xscale=50.0, wscale=5.0,
          note="saturated + 2 layers + bidir + lengths + proj"),
    *both("lstm_unbatched", unbatched=True, note="unbatched input (T, I) with h0, c0"),
    *both("lstm_unbatched_l2_bidir_noh0", unbatched=True, L=2, bidir=True, h0=False, c0=False,
          note="unbatched, 2 layers, bidirectional, no state"),
    *both("lstm_unbatched_proj", unbatched=True, H=5, P=2, note="unbatched with proj"),
    *both("lstm_gradout", grad_of=("output",), note="loss uses output only"),
    *both("lstm_gradhn", grad_of=("h_n",), note="loss uses h_n only"),
    *both("lstm_gradcn", grad_of=("c_n",), note="loss uses c_n only"),
    *both("lstm_gradcn_bidir_lengths", T=6, N=4, bidir=True, lengths=[6, 2, 1, 4],
          grad_of=("c_n",), note="c_n-only grad + bidirectional + lengths"),
    *both("lstm_gradhncn_l2_lengths_noh0", T=6, N=4, L=2, lengths=[3, 1, 6, 2],
          grad_of=("h_n", "c_n"), h0=False, c0=False, note="h_n and c_n grads, 2 layers, lengths"),
    *both("cell_batched", kind="cell", N=3, I=4, H=6, note="LSTMCell, batched, h and c given"),
    *both("cell_batched_nostate", kind="cell", N=3, I=4, H=6, h0=False, c0=False,
          note="LSTMCell, batched, no state"),
    *both("cell_unbatched", kind="cell", unbatched=True, I=4, H=6, note="LSTMCell, unbatched"),
    *both("cell_nobias", kind="cell", N=3, I=4, H=6, bias=False, note="LSTMCell, bias=False"),
    *both("cell_size1", kind="cell", N=1, I=1, H=1, note="LSTMCell, every size 1"),
    *both("cell_H17_I19", kind="cell", N=5, I=19, H=17, note="LSTMCell, SIMD tail H=17"),
    *both("cell_sat_x50_w5", kind="cell", N=3, xscale=50.0, wscale=5.0,
          note="LSTMCell, saturated"),
    *both("cell_gradc_only", kind="cell", N=3, grad_of=("c_n",), note="LSTMCell, dc_new only"),
]


def seed_of(name):
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")


# --------------------------------------------------------------------------- equations
def sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def numpy_lstm(c, w, x, h0, c0, lengths):
    """The LSTM written out from its equations in f64: returns output, h_n, c_n as
    (T, N, D*P), (L*D, N, P), (L*D, N, H), time-major and batched."""
    T, N = x.shape[0], x.shape[1]
    L, D, H = c["L"], 2 if c["bidir"] else 1, c["H"]
    P = c["P"] or H
    lens = lengths if lengths is not None else np.full(N, T)
    h_n = np.zeros((L * D, N, P))
    c_n = np.zeros((L * D, N, H))
    inp = x
    for l in range(L):
        out = np.zeros((T, N, D * P))
        for d in range(D):
            sfx = f"_l{l}" + ("_reverse" if d else "")
            wih, whh = w["weight_ih" + sfx], w["weight_hh" + sfx]
            b = (w["bias_ih" + sfx] + w["bias_hh" + sfx]) if c["bias"] else 0.0
            whr = w.get("weight_hr" + sfx)
            for n in range(N):
                h = h0[l * D + d, n].copy()
                cc = c0[l * D + d, n].copy()
                steps = range(lens[n]) if d == 0 else range(lens[n] - 1, -1, -1)
                for t in steps:
                    a = wih @ inp[t, n] + whh @ h + b
                    i, f, g, o = sig(a[:H]), sig(a[H:2 * H]), np.tanh(a[2 * H:3 * H]), sig(a[3 * H:])
                    cc = f * cc + i * g
                    h = o * np.tanh(cc)
                    if whr is not None:
                        h = whr @ h
                    out[t, n, d * P:(d + 1) * P] = h
                h_n[l * D + d, n] = h
                c_n[l * D + d, n] = cc
        inp = out
    return inp, h_n, c_n


def run_case(c):
    dt = torch.float64 if c["dtype"] == "f64" else torch.float32
    seed = seed_of(c["name"])
    torch.manual_seed(seed)
    T, N, I, H, L, P = c["T"], c["N"], c["I"], c["H"], c["L"], c["P"]
    D = 2 if c["bidir"] else 1
    is_cell = c["kind"] == "cell"
    Hout = P or H
    if is_cell:
        m = torch.nn.LSTMCell(I, H, bias=c["bias"])
    else:
        m = torch.nn.LSTM(I, H, num_layers=L, bias=c["bias"], batch_first=c["bf"],
                          bidirectional=c["bidir"], proj_size=P)
    m = m.to(dt)
    if c["wscale"] != 1.0:
        with torch.no_grad():
            for p in m.parameters():
                p.mul_(c["wscale"])
    keys = list(m.state_dict().keys())
    params = dict(m.named_parameters())

    if is_cell:
        xshape = (I,) if c["unbatched"] else (N, I)
    elif c["unbatched"]:
        xshape = (T, I)
    else:
        xshape = (N, T, I) if c["bf"] else (T, N, I)
    x = (torch.randn(xshape, dtype=dt) * c["xscale"]).requires_grad_(True)

    def state(width, given):
        if not given:
            return None
        if is_cell:
            shape = (H,) if c["unbatched"] else (N, H)
        else:
            shape = (L * D, width) if c["unbatched"] else (L * D, N, width)
        return torch.randn(shape, dtype=dt).requires_grad_(True)

    h0, c0 = state(Hout, c["h0"]), state(H, c["c0"])
    lengths = None
    if c["lengths"] is not None:
        lengths = torch.tensor(c["lengths"], dtype=torch.int64)
        assert int(lengths.min()) == 1 and int(lengths.max()) == T
        assert not bool((lengths[:-1] >= lengths[1:]).all()), "lengths must be unsorted"

    out = {}
    if is_cell:
        zeros = torch.zeros(xshape[:-1] + (H,), dtype=dt)
        hx = None if h0 is None and c0 is None else (
            h0 if h0 is not None else zeros, c0 if c0 is not None else zeros)
        h_new, c_new = m(x, hx)
        y, h_n, c_n = None, h_new, c_new
        out["h_new"], out["c_new"] = h_new, c_new
    else:
        zeros_h = torch.zeros((L * D,) + ((N,) if not c["unbatched"] else ()) + (Hout,), dtype=dt)
        zeros_c = torch.zeros((L * D,) + ((N,) if not c["unbatched"] else ()) + (H,), dtype=dt)
        hx = None if h0 is None and c0 is None else (
            h0 if h0 is not None else zeros_h, c0 if c0 is not None else zeros_c)
        if lengths is not None:
            packed = pack_padded_sequence(x, lengths, batch_first=c["bf"], enforce_sorted=False)
            pout, (h_n, c_n) = m(packed, hx)
            y, ylens = pad_packed_sequence(pout, batch_first=c["bf"], total_length=T)
            assert torch.equal(ylens, lengths)
        else:
            y, (h_n, c_n) = m(x, hx)
        out["output"], out["h_n"], out["c_n"] = y, h_n, c_n

    loss = torch.zeros((), dtype=dt)
    names = {"output": "grad_output", "h_n": "grad_h_n", "c_n": "grad_c_n"}
    if is_cell:
        names = {"h_n": "grad_h_new", "c_n": "grad_c_new"}
    for what, t in (("output", y), ("h_n", h_n), ("c_n", c_n)):
        if t is None:
            continue
        g = torch.randn(t.shape, dtype=dt)
        if what in c["grad_of"]:
            loss = loss + (t * g).sum()
            out[names[what]] = g

    leaves = [x] + [s for s in (h0, c0) if s is not None] + [params[k] for k in keys]
    grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    grads = [torch.zeros_like(l) if g is None else g for l, g in zip(leaves, grads)]
    out["input"] = x
    out["grad.input"] = grads[0]
    i = 1
    for name, s in (("h0", h0), ("c0", c0)):
        if s is not None:
            out[name] = s
            out["grad." + name] = grads[i]
            i += 1
    if lengths is not None:
        out["lengths"] = lengths
    for k, g in zip(keys, grads[i:]):
        out["w." + k] = params[k]
        out["grad." + k] = g
    for k, t in out.items():
        if t.dtype != torch.int64:
            assert t.dtype == dt, (c["name"], k, t.dtype)
            assert bool(torch.isfinite(t).all()), (c["name"], k)

    # The independent implementation, in f64 from the same values.
    if not is_cell:
        cc = dict(c)
        xt = x.detach().double().numpy()
        if c["unbatched"]:
            xt = xt[:, None, :]
        elif c["bf"]:
            xt = xt.transpose(1, 0, 2)
        def st(s, width):
            if s is None:
                return np.zeros((L * D, xt.shape[1], width))
            a = s.detach().double().numpy()
            return a[:, None, :] if c["unbatched"] else a
        w = {k: params[k].detach().double().numpy() for k in keys}
        ny, nh, nc = numpy_lstm(cc, w, xt, st(h0, Hout), st(c0, H),
                                None if lengths is None else lengths.numpy())
        ty = y.detach().double().numpy()
        ty = ty[:, None, :] if c["unbatched"] else (ty.transpose(1, 0, 2) if c["bf"] else ty)
        th = h_n.detach().double().numpy()
        tcn = c_n.detach().double().numpy()
        if c["unbatched"]:
            th, tcn = th[:, None, :], tcn[:, None, :]
        tol = 1e-10 if c["dtype"] == "f64" else 1e-4
        for what, a, b in (("output", ny, ty), ("h_n", nh, th), ("c_n", nc, tcn)):
            err = float(np.max(np.abs(a - b) / (1 + np.abs(b))))
            assert err < tol, f"{c['name']}: numpy and PyTorch differ in {what} by {err}"

    extra = [f"seed={seed}",
             "weights=default init" + (f" x{c['wscale']:g}" if c["wscale"] != 1.0 else ""),
             "input=randn" + (f"*{c['xscale']:g}" if c["xscale"] != 1.0 else "")]
    if lengths is not None:
        extra.append("packed via pack_padded_sequence(enforce_sorted=False), "
                     "pad_packed_sequence(total_length=T)")
    config = {
        "kind": c["kind"], "input_size": I, "hidden_size": H, "proj_size": P,
        "num_layers": 1 if is_cell else L, "bias": c["bias"],
        "batch_first": False if is_cell else c["bf"],
        "bidirectional": False if is_cell else c["bidir"], "unbatched": c["unbatched"],
        "has_h0": c["h0"], "has_c0": c["c0"], "has_lengths": lengths is not None,
        "grad_of": list(c["grad_of"]), "dtype": c["dtype"], "T": 0 if is_cell else T,
        "N": 1 if c["unbatched"] else N, "note": c["note"] + "; " + "; ".join(extra),
    }
    meta = {"config": json.dumps(config, sort_keys=True, separators=(",", ":"))}
    return safetensors_bytes(out, meta)


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(OUT_DIR, exist_ok=True)
    names = [c["name"] for c in CASES]
    assert len(names) == len(set(names)), "duplicate case names"
    total = 0
    for c in CASES:
        data = run_case(c)
        path = os.path.join(OUT_DIR, c["name"] + ".safetensors")
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        total += len(data)
    print(f"{total:9d}  total bytes in {len(CASES)} files under "
          f"{os.path.relpath(OUT_DIR, os.path.dirname(os.path.dirname(HERE)))}")
    stale = sorted(set(f for f in os.listdir(OUT_DIR) if f.endswith(".safetensors"))
                   - set(n + ".safetensors" for n in names))
    if stale:
        print("warning: files not produced by this script: " + ", ".join(stale), file=sys.stderr)


if __name__ == "__main__":
    main()
