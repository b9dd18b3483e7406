# Golden-file generator for convolution: PyTorch F.conv1d / F.conv2d outputs and autograd
# gradients for a fixed list of small cases, as .npy files under tests/reference/golden/conv/.
"""Regenerate with:  /usr/bin/python3 tests/reference/gen_conv_golden.py

Needs Debian's python3-torch and python3-numpy. Deterministic: each case seeds torch from a
hash of its name and runs single-threaded. Writes golden/conv/<case>/<tensor>.npy for every
case and golden/conv/cases.json, the index the C++ tests read:
  {"cases": [{"name", "dims" (1 or 2), "dtype", "stride", "padding", "dilation" ([h, w] for
  2-d, [l] for 1-d), "groups", "bias", "note"}, ...]}
Tensors per case: input, weight, bias (when bias), grad_output (upstream dL/d output),
output, grad_input, grad_weight, grad_bias (when bias). The loss is sum(output * grad_output).
"""

import hashlib
import json
import os

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "golden", "conv")


def case(name, dims, N, C, D, size, k, stride=1, padding=0, dilation=1, groups=1, bias=True,
         note=""):
    """size and k: (H, W) / (KH, KW) for 2-d, (L,) / (K,) for 1-d; stride etc. int or tuple."""
    def tup(v):
        return list(v) if isinstance(v, (tuple, list)) else [v] * dims
    return dict(name=name, dims=dims, N=N, C=C, D=D, size=list(size), k=list(k),
                stride=tup(stride), padding=tup(padding), dilation=tup(dilation), groups=groups,
                bias=bias, note=note)


CASES = [
    case("c2_basic", 2, 2, 3, 4, (7, 5), (3, 3), note="H=7 W=5 C=3 D=4 K=3, no padding"),
    case("c2_pad1", 2, 2, 3, 4, (7, 5), (3, 3), padding=1, note="padding 1 (same size)"),
    case("c2_stride2_pad1", 2, 2, 3, 4, (7, 5), (3, 3), stride=2, padding=1,
         note="stride 2: odd sizes leave a partial window"),
    case("c2_k1x1", 2, 2, 3, 4, (7, 5), (1, 1), note="1x1 kernel (pointwise)"),
    case("c2_k1x1_stride2", 2, 2, 3, 4, (7, 5), (1, 1), stride=2, note="1x1 kernel, stride 2"),
    case("c2_k5x2", 2, 2, 3, 4, (7, 5), (5, 2), stride=(2, 1), padding=(1, 0),
         note="non-square 5x2 kernel, stride (2, 1), padding (1, 0)"),
    case("c2_dil2", 2, 2, 3, 4, (7, 5), (3, 3), padding=2, dilation=2, note="dilation 2"),
    case("c2_groups2", 2, 2, 4, 6, (7, 5), (3, 3), padding=1, groups=2, note="groups 2"),
    case("c2_depthwise", 2, 2, 3, 6, (7, 5), (3, 3), padding=1, groups=3,
         note="depthwise, multiplier 2 (groups = C)"),
    case("c2_nobias", 2, 2, 3, 4, (7, 5), (3, 3), bias=False, note="no bias"),
    case("c2_mixed", 2, 3, 4, 4, (9, 8), (3, 2), stride=(2, 3), padding=(1, 2),
         dilation=(2, 1), groups=2, bias=False,
         note="per-dimension stride (2, 3), padding (1, 2), dilation (2, 1), groups 2, no bias"),
    case("c2_single_channel", 2, 1, 1, 1, (6, 6), (3, 3), padding=1,
         note="single channel, the seed's picture"),
    case("c2_kernel_fills_input", 2, 2, 3, 2, (7, 5), (7, 5), note="kernel = input: 1x1 output"),
    case("c1_basic", 1, 2, 3, 4, (11,), (3,), padding=1, note="conv1d, L=11, padding 1"),
    case("c1_mixed", 1, 2, 4, 6, (13,), (3,), stride=2, padding=2, dilation=2, groups=2,
         bias=False, note="conv1d stride 2, padding 2, dilation 2, groups 2, no bias"),
]


def seed_of(name):
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")


def run(c, dtype):
    torch.manual_seed(seed_of(c["name"]))
    dt = torch.float32 if dtype == "f32" else torch.float64
    x = torch.randn([c["N"], c["C"]] + c["size"], dtype=dt, requires_grad=True)
    w = torch.randn([c["D"], c["C"] // c["groups"]] + c["k"], dtype=dt) * 0.5
    w.requires_grad_(True)
    b = (torch.randn([c["D"]], dtype=dt) * 0.5).requires_grad_(True) if c["bias"] else None
    conv = F.conv2d if c["dims"] == 2 else F.conv1d
    y = conv(x, w, b, stride=c["stride"], padding=c["padding"], dilation=c["dilation"],
             groups=c["groups"])
    dy = torch.randn(y.shape, dtype=dt)
    (y * dy).sum().backward()
    t = dict(input=x, weight=w, grad_output=dy, output=y, grad_input=x.grad, grad_weight=w.grad)
    if b is not None:
        t["bias"] = b
        t["grad_bias"] = b.grad
    return {k: v.detach().numpy() for k, v in t.items()}


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    index = []
    total = 0
    for c in CASES:
        for dtype in ("f32", "f64"):
            name = f"{c['name']}_{dtype}"
            d = os.path.join(OUT_DIR, name)
            os.makedirs(d, exist_ok=True)
            for k, v in sorted(run(c, dtype).items()):
                path = os.path.join(d, k + ".npy")
                np.save(path, np.ascontiguousarray(v))
                total += os.path.getsize(path)
            index.append(dict(name=name, dims=c["dims"], dtype=dtype, stride=c["stride"],
                              padding=c["padding"], dilation=c["dilation"], groups=c["groups"],
                              bias=c["bias"], note=c["note"]))
    with open(os.path.join(OUT_DIR, "cases.json"), "w") as f:
        json.dump({"cases": index}, f, indent=1)
        f.write("\n")
    total += os.path.getsize(os.path.join(OUT_DIR, "cases.json"))
    print(f"{len(index)} cases, {total} bytes in {OUT_DIR}")


if __name__ == "__main__":
    main()
