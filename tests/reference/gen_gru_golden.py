# Golden-file generator: PyTorch nn.GRU / nn.GRUCell forward results and autograd gradients
# for a fixed list of small cases, written as safetensors files into tests/reference/golden/.
"""Regenerate with:  /usr/bin/python3 tests/reference/gen_gru_golden.py

Needs Debian's python3-torch (apt-get install python3-torch) and python3-numpy; no other
packages (the safetensors files are written by hand). Output is deterministic: running the
script twice gives byte-identical files. See tests/reference/README.md for the format.
"""

import hashlib
import json
import os
import struct
import sys

import numpy as np
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "golden")

_DTYPES = {
    torch.float32: ("F32", "<f4"),
    torch.float64: ("F64", "<f8"),
    torch.int64: ("I64", "<i8"),
}


# --------------------------------------------------------------------------- safetensors
def safetensors_bytes(tensors, metadata):
    """Serializes {name: torch.Tensor} plus string metadata as safetensors.

    Layout: u64 LE header length, JSON header (keys sorted, padded with spaces to a multiple
    of 8), then every tensor's little-endian C-order bytes, contiguous, in sorted key order.
    """
    header = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        if t.dtype not in _DTYPES:
            raise TypeError(f"{name}: unsupported dtype {t.dtype}")
        st_dtype, np_dtype = _DTYPES[t.dtype]
        data = np.ascontiguousarray(t.numpy()).astype(np_dtype, copy=False).tobytes(order="C")
        # Contiguous data (as the safetensors spec requires) keeps each tensor aligned to its
        # element size only; check that so readers may rely on it.
        assert offset % np.dtype(np_dtype).itemsize == 0, f"{name}: misaligned at {offset}"
        header[name] = {
            "dtype": st_dtype,
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    hjson = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((-len(hjson)) % 8)
    return struct.pack("<Q", len(hjson)) + hjson + b"".join(blobs)


# --------------------------------------------------------------------------- cases
def C(name, **kw):
    """A case description with defaults filled in."""
    c = dict(
        name=name, kind="gru", T=5, N=3, I=4, H=6, L=1, bias=True, bf=False, bidir=False,
        unbatched=False, h0=True, lengths=None, grad_of="both", dtype="f32",
        wscale=1.0, xscale=1.0, note="",
    )
    c.update(kw)
    if c["kind"] == "cell":
        c["grad_of"] = "h_new"
    return c


def both(name, **kw):
    """The same case in f32 and f64."""
    return [C(f"{name}_f32", dtype="f32", **kw), C(f"{name}_f64", dtype="f64", **kw)]


CASES = [
    # 1. basic
    *both("gru_basic", note="basic: 1 layer, h0 given, grads of output and h_n"),
    *both("gru_basic_noh0", h0=False, note="basic without h0 (zeros)"),
    # 2. sizes
    *both("gru_size1", T=1, N=1, I=1, H=1, note="every size 1"),
    *both("gru_primes_T7_N5_I13_H11", T=7, N=5, I=13, H=11, note="prime sizes"),
    *both("gru_H17_I19", T=4, N=3, I=19, H=17, note="SIMD-width tail: H=17"),
    *both("gru_H33_I19", T=4, N=3, I=19, H=33, note="SIMD-width tail: H=33"),
    *both("gru_H8", T=4, N=3, I=8, H=8, note="H=8 (exact SIMD width)"),
    *both("gru_H16", T=4, N=2, I=16, H=16, note="H=16 (exact SIMD width)"),
    # 3. options and combinations
    *both("gru_l2", L=2, note="2 layers"),
    *both("gru_l3", L=3, T=4, note="3 layers"),
    *both("gru_l3_noh0", L=3, T=4, h0=False, note="3 layers, no h0"),
    *both("gru_bidir", bidir=True, note="bidirectional"),
    *both("gru_bidir_noh0", bidir=True, h0=False, note="bidirectional, no h0"),
    *both("gru_bf", bf=True, note="batch_first"),
    *both("gru_nobias", bias=False, note="bias=False"),
    *both("gru_lengths", T=6, N=4, lengths=[3, 6, 1, 5],
          note="variable lengths (packed, enforce_sorted=False), no h0", h0=False),
    *both("gru_lengths_h0", T=6, N=4, lengths=[3, 6, 1, 5], note="variable lengths with h0"),
    *both("gru_lengths_bf", T=6, N=4, bf=True, lengths=[2, 1, 6, 4],
          note="variable lengths, batch_first"),
    *both("gru_l2_bidir_lengths_bf_h0", T=6, N=4, L=2, bidir=True, bf=True,
          lengths=[4, 6, 1, 3], note="2 layers + bidirectional + lengths + batch_first + h0"),
    *both("gru_nobias_bidir_lengths", T=5, N=3, bias=False, bidir=True, lengths=[2, 5, 1],
          h0=False, note="bias=False + bidirectional + lengths, no h0"),
    *both("gru_l3_bidir_bf_nobias_h0", T=4, N=2, I=3, H=5, L=3, bidir=True, bf=True,
          bias=False, note="3 layers + bidirectional + batch_first + bias=False + h0"),
    *both("gru_l2_lengths_noh0", T=5, N=3, L=2, lengths=[5, 1, 3],
          h0=False, note="2 layers + lengths, no h0"),
    *both("gru_wscale_small_l2_bidir", L=2, bidir=True, wscale=0.3,
          note="all weights and biases scaled x0.3 after default init"),
    # 4. long sequences
    *both("gru_long_T300", T=300, N=2, I=3, H=5, note="long sequence T=300"),
    *both("gru_long_T301", T=301, N=2, I=3, H=5, h0=False, note="long sequence T=301, no h0"),
    # 5. saturation
    *both("gru_sat_x50", xscale=50.0, note="saturated gates: input = randn*50"),
    *both("gru_sat_x50_w5", xscale=50.0, wscale=5.0,
          note="saturated gates: input = randn*50, weights and biases x5"),
    *both("gru_sat_x50_w5_l2_bidir_lengths", L=2, bidir=True, T=5, N=3, lengths=[1, 5, 3],
          xscale=50.0, wscale=5.0,
          note="saturated (input randn*50, weights x5) + 2 layers + bidir + lengths"),
    # 6. unbatched
    *both("gru_unbatched_h0", unbatched=True, note="unbatched input (T, I) with h0 (L*D, H)"),
    *both("gru_unbatched_noh0", unbatched=True, h0=False, note="unbatched input, no h0"),
    *both("gru_unbatched_l2_bidir_h0", unbatched=True, L=2, bidir=True,
          note="unbatched, 2 layers, bidirectional, h0"),
    *both("gru_unbatched_l2_bidir_noh0", unbatched=True, L=2, bidir=True, h0=False,
          note="unbatched, 2 layers, bidirectional, no h0"),
    # 7. which gradient
    *both("gru_gradout", grad_of="output", note="loss uses output only"),
    *both("gru_gradhn", grad_of="h_n", note="loss uses h_n only"),
    *both("gru_gradout_bidir_lengths", T=6, N=4, bidir=True, lengths=[6, 2, 1, 4],
          grad_of="output", note="output-only grad + bidirectional + lengths + h0"),
    *both("gru_gradhn_bidir_lengths", T=6, N=4, bidir=True, lengths=[6, 2, 1, 4],
          grad_of="h_n", note="h_n-only grad + bidirectional + lengths + h0"),
    *both("gru_gradhn_l2_bidir_lengths_bf_noh0", T=6, N=4, L=2, bidir=True, bf=True,
          lengths=[3, 1, 6, 2], grad_of="h_n", h0=False,
          note="h_n-only grad + 2 layers + bidirectional + lengths + batch_first, no h0"),
    # 8. GRUCell
    *both("cell_batched_h", kind="cell", N=3, I=4, H=6, note="GRUCell, batched (N, I), h given"),
    *both("cell_batched_noh", kind="cell", N=3, I=4, H=6, h0=False,
          note="GRUCell, batched, no h (zeros)"),
    *both("cell_unbatched_h", kind="cell", unbatched=True, I=4, H=6,
          note="GRUCell, unbatched x (I), h (H)"),
    *both("cell_unbatched_noh", kind="cell", unbatched=True, I=4, H=6, h0=False,
          note="GRUCell, unbatched, no h"),
    *both("cell_nobias_h", kind="cell", N=3, I=4, H=6, bias=False, note="GRUCell, bias=False"),
    *both("cell_size1", kind="cell", N=1, I=1, H=1, note="GRUCell, every size 1"),
    *both("cell_H17_I19", kind="cell", N=5, I=19, H=17, note="GRUCell, SIMD-width tail H=17"),
    *both("cell_sat_x50_w5", kind="cell", N=3, I=4, H=6, xscale=50.0, wscale=5.0,
          note="GRUCell, saturated: x = randn*50, weights and biases x5"),
]


# --------------------------------------------------------------------------- running
def seed_of(name):
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")


def run_case(c):
    dt = torch.float64 if c["dtype"] == "f64" else torch.float32
    seed = seed_of(c["name"])
    torch.manual_seed(seed)
    T, N, I, H, L = c["T"], c["N"], c["I"], c["H"], c["L"]
    D = 2 if c["bidir"] else 1
    is_cell = c["kind"] == "cell"

    if is_cell:
        m = torch.nn.GRUCell(I, H, bias=c["bias"])
    else:
        m = torch.nn.GRU(I, H, num_layers=L, bias=c["bias"], batch_first=c["bf"],
                         bidirectional=c["bidir"])
    m = m.to(dt)
    if c["wscale"] != 1.0:
        with torch.no_grad():
            for p in m.parameters():
                p.mul_(c["wscale"])
    keys = list(m.state_dict().keys())
    params = dict(m.named_parameters())

    # input
    if is_cell:
        xshape = (I,) if c["unbatched"] else (N, I)
    elif c["unbatched"]:
        xshape = (T, I)
    else:
        xshape = (N, T, I) if c["bf"] else (T, N, I)
    x = (torch.randn(xshape, dtype=dt) * c["xscale"]).requires_grad_(True)

    h0 = None
    if c["h0"]:
        if is_cell:
            hshape = (H,) if c["unbatched"] else (N, H)
        else:
            hshape = (L * D, H) if c["unbatched"] else (L * D, N, H)
        h0 = torch.randn(hshape, dtype=dt).requires_grad_(True)

    lengths = None
    if c["lengths"] is not None:
        assert not c["unbatched"] and not is_cell
        lengths = torch.tensor(c["lengths"], dtype=torch.int64)
        assert lengths.shape == (N,)
        assert int(lengths.min()) == 1 and int(lengths.max()) == T
        assert not bool((lengths[:-1] >= lengths[1:]).all()), "lengths must be unsorted"

    # forward
    out = {}
    if is_cell:
        h_new = m(x, h0)
        gh = torch.randn(h_new.shape, dtype=dt)
        loss = (h_new * gh).sum()
        out["h_new"] = h_new
        out["grad_h_new"] = gh
    else:
        if lengths is not None:
            packed = pack_padded_sequence(x, lengths, batch_first=c["bf"], enforce_sorted=False)
            pout, h_n = m(packed, h0)
            y, ylens = pad_packed_sequence(pout, batch_first=c["bf"], total_length=T)
            assert torch.equal(ylens, lengths)
        else:
            y, h_n = m(x, h0)
        g_y = torch.randn(y.shape, dtype=dt)
        g_h = torch.randn(h_n.shape, dtype=dt)
        loss = torch.zeros((), dtype=dt)
        if c["grad_of"] in ("output", "both"):
            loss = loss + (y * g_y).sum()
            out["grad_output"] = g_y
        if c["grad_of"] in ("h_n", "both"):
            loss = loss + (h_n * g_h).sum()
            out["grad_h_n"] = g_h
        out["output"] = y
        out["h_n"] = h_n

    leaves = [x] + ([h0] if h0 is not None else []) + [params[k] for k in keys]
    grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    grads = [torch.zeros_like(l) if g is None else g for l, g in zip(leaves, grads)]

    out["input"] = x
    if h0 is not None:
        out["h0"] = h0
    if lengths is not None:
        out["lengths"] = lengths
    out["grad.input"] = grads[0]
    if h0 is not None:
        out["grad.h0"] = grads[1]
    for k, g in zip(keys, grads[1 + (h0 is not None):]):
        out["w." + k] = params[k]
        out["grad." + k] = g
    for k, t in out.items():
        if t.dtype != torch.int64:
            assert t.dtype == dt, (c["name"], k, t.dtype)
            assert bool(torch.isfinite(t).all()), (c["name"], k)

    note = c["note"]
    extra = [f"seed={seed}"]
    extra.append("weights=default init" + (f" x{c['wscale']:g}" if c["wscale"] != 1.0 else ""))
    extra.append("input=randn" + (f"*{c['xscale']:g}" if c["xscale"] != 1.0 else ""))
    if lengths is not None:
        extra.append("packed via pack_padded_sequence(enforce_sorted=False), "
                     "pad_packed_sequence(total_length=T); output is 0 at t >= len; "
                     "grad_output is randn at padded positions too (it must not matter)")
    config = {
        "kind": c["kind"],
        "input_size": I,
        "hidden_size": H,
        "num_layers": 1 if is_cell else L,
        "bias": c["bias"],
        "batch_first": False if is_cell else c["bf"],
        "bidirectional": False if is_cell else c["bidir"],
        "unbatched": c["unbatched"],
        "has_h0": c["h0"],
        "has_lengths": lengths is not None,
        "grad_of": c["grad_of"],
        "dtype": c["dtype"],
        "T": 0 if is_cell else T,
        "N": 1 if c["unbatched"] else N,
        "note": note + "; " + "; ".join(extra),
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
        print(f"{len(data):9d}  {os.path.relpath(path, os.path.dirname(os.path.dirname(HERE)))}")
    print(f"{total:9d}  total bytes in {len(CASES)} files")
    stale = sorted(set(f for f in os.listdir(OUT_DIR) if f.endswith(".safetensors"))
                   - set(n + ".safetensors" for n in names))
    if stale:
        print("warning: files not produced by this script: " + ", ".join(stale), file=sys.stderr)


if __name__ == "__main__":
    main()
