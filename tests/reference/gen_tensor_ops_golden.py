#!/usr/bin/python3
# Golden files for tests/test_tensor_ops.cpp and tests/test_rearrange.cpp: PyTorch's results
# for broadcasting element-wise ops, matmul, reductions and rearrange (as permute/reshape).
#
# Run with Debian's python3-torch: /usr/bin/python3 tests/reference/gen_tensor_ops_golden.py
# Writes small .npy files to tests/reference/golden/tensor_ops/ (next to this script) and
# prints the total size. Deterministic: one fixed seed per case, computed from its name.
import os
import zlib

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden", "tensor_ops")
DTYPES = {"f32": torch.float32, "f64": torch.float64}
written = []


def rng(name):
    return torch.Generator().manual_seed(zlib.crc32(name.encode()))


def randn(name, shape, dtype, scale=1.0):
    return (torch.randn(tuple(shape), generator=rng(name), dtype=torch.float64) * scale).to(dtype)


def save(name, t):
    path = os.path.join(OUT, name + ".npy")
    np.save(path, t.contiguous().numpy())
    written.append(path)


def binary_cases():
    # (case, a shape, b shape, op); b is kept away from 0 for div and a positive for pow.
    cases = [
        ("add", (2, 1, 4), (3, 1), torch.add),
        ("sub", (4,), (3, 1), torch.sub),
        ("mul", (3, 4), (4,), torch.mul),
        ("div", (2, 3), (2, 1), torch.div),
        ("maximum", (2, 3, 1), (1, 4), torch.maximum),
        ("minimum", (5,), (), torch.minimum),
        ("pow", (3, 2), (2,), torch.pow),
    ]
    for op, sa, sb, fn in cases:
        for dn, dt in DTYPES.items():
            name = f"binary_{op}_{dn}"
            a = randn(name + "a", sa, dt)
            b = randn(name + "b", sb, dt)
            if op == "div":
                b = b.sign() * (b.abs() + 0.5)
            if op == "pow":
                a = a.abs() + 0.1
            save(name + "_a", a)
            save(name + "_b", b)
            save(name + "_out", fn(a, b))


def unary_cases():
    for dn, dt in DTYPES.items():
        x = randn("unary_x_" + dn, (3, 5), dt, 3.0)
        save(f"unary_x_{dn}", x)
        save(f"unary_neg_{dn}", -x)
        save(f"unary_exp_{dn}", torch.exp(x))
        save(f"unary_log_{dn}", torch.log(x.abs() + 0.1))  # the test applies log to |x| + 0.1
        save(f"unary_sigmoid_{dn}", torch.sigmoid(x))
        save(f"unary_tanh_{dn}", torch.tanh(x))
        save(f"unary_relu_{dn}", torch.relu(x))
        save(f"unary_abs_{dn}", torch.abs(x))
        save(f"unary_sqrt_{dn}", torch.sqrt(x.abs()))  # the test applies sqrt to |x|


def matmul_cases():
    cases = [
        ("mm", (3, 4), (4, 5)),
        ("dot", (7,), (7,)),
        ("vec_batched", (4,), (2, 4, 3)),
        ("batched_vec", (2, 3, 4), (4,)),
        ("broadcast", (2, 1, 3, 4), (5, 4, 2)),
    ]
    for case, sa, sb in cases:
        for dn, dt in DTYPES.items():
            name = f"matmul_{case}_{dn}"
            a = randn(name + "a", sa, dt)
            b = randn(name + "b", sb, dt)
            save(name + "_a", a)
            save(name + "_b", b)
            save(name + "_out", torch.matmul(a, b))


def reduce_cases():
    for dn, dt in DTYPES.items():
        x = randn("reduce_x_" + dn, (3, 4, 5), dt)
        x[1, 2, 3] = x[1, 2, 1]  # a tie along the last dimension: the first index must win
        save(f"reduce_x_{dn}", x)
        save(f"reduce_sum_d02_{dn}", x.sum(dim=(0, 2)))
        save(f"reduce_mean_d1_keep_{dn}", x.mean(dim=1, keepdim=True))
        save(f"reduce_sum_all_{dn}", x.sum())
        save(f"reduce_max_d2_values_{dn}", x.max(dim=2).values)
        save(f"reduce_max_d2_indices_{dn}", x.max(dim=2).indices)
        save(f"reduce_min_d0_values_{dn}", x.min(dim=0).values)
        save(f"reduce_min_d0_indices_{dn}", x.min(dim=0).indices)
        save(f"reduce_max_all_{dn}", x.max())


def rearrange_cases():
    # einops is not installed: each pattern is written out as the permute / reshape it means.
    x = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5)
    save("rearrange_x", x)
    # "b c h w -> b (h w) c"
    save("rearrange_bhwc_merge", x.permute(0, 2, 3, 1).reshape(2, 20, 3))
    # "b c h w -> (b h) (c w)"
    save("rearrange_bh_cw", x.permute(0, 2, 1, 3).reshape(8, 15))
    # "b c (h2 h) w -> b (c h2) h w" with h2 = 2 (x's h = 4 split as 2 x 2)
    save("rearrange_split_merge", x.reshape(2, 3, 2, 2, 5).reshape(2, 6, 2, 5))
    # "b c h w -> w 1 (b c) h"
    save("rearrange_unit", x.permute(3, 0, 1, 2).reshape(5, 1, 6, 4))
    # "... h w -> ... w h"
    save("rearrange_ellipsis", x.transpose(2, 3))
    # "b ... -> b (...)"
    save("rearrange_flatten", x.reshape(2, 60))


os.makedirs(OUT, exist_ok=True)
torch.manual_seed(0)
binary_cases()
unary_cases()
matmul_cases()
reduce_cases()
rearrange_cases()
total = sum(os.path.getsize(p) for p in written)
print(f"{len(written)} files, {total} bytes in {OUT}")
