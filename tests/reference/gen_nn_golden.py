# Golden-file generator for the nn building blocks and training utilities: nn.Linear,
# nn.Embedding, F.cross_entropy, torch.optim Adam / AdamW / SGD traces, clip_grad_norm_.
"""Regenerate with:  /usr/bin/python3 tests/reference/gen_nn_golden.py

Needs Debian's python3-torch and python3-numpy only. Writes small safetensors files (one
per case, metadata "config" = the case as JSON) into tests/reference/golden/nn/, plus
schedule.safetensors (learning-rate schedule values from the formula of grux/optim.h,
computed with Python floats). Deterministic: every case seeds torch from a hash of its
name and torch runs single-threaded; running twice gives byte-identical files.
"""

import hashlib
import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "golden", "nn")

DTYPES = {"f32": torch.float32, "f64": torch.float64}
ST_DTYPE = {torch.float32: ("F32", "<f4"), torch.float64: ("F64", "<f8"),
            torch.int64: ("I64", "<i8")}


def encode_safetensors(tensors, config):
    """{name: tensor} + a config dict -> safetensors bytes (sorted keys, header padded to 8)."""
    header, chunks, pos = {}, [], 0
    for key in sorted(tensors):
        t = tensors[key].detach().contiguous()
        code, np_type = ST_DTYPE[t.dtype]
        raw = t.numpy().astype(np_type, copy=False).tobytes(order="C")
        header[key] = {"dtype": code, "shape": list(t.shape), "data_offsets": [pos, pos + len(raw)]}
        chunks.append(raw)
        pos += len(raw)
    header["__metadata__"] = {"config": json.dumps(config, sort_keys=True)}
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def seed_for(name):
    torch.manual_seed(int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little"))


def write(name, tensors, config):
    data = encode_safetensors(tensors, dict(config, name=name))
    with open(os.path.join(OUT_DIR, name + ".safetensors"), "wb") as f:
        f.write(data)
    return len(data)


# ---------------------------------------------------------------------------- layers
def linear_case(name, M, I, O, bias, dtype):
    seed_for(name)
    dt = DTYPES[dtype]
    layer = torch.nn.Linear(I, O, bias=bias).to(dt)
    x = torch.randn(M, I, dtype=dt, requires_grad=True)
    y = layer(x)
    dy = torch.randn(M, O, dtype=dt)
    y.backward(dy)
    t = {"x": x, "w": layer.weight, "dy": dy, "y": y, "grad.x": x.grad,
         "grad.w": layer.weight.grad}
    if bias:
        t["b"] = layer.bias
        t["grad.b"] = layer.bias.grad
    return write(name, t, dict(kind="linear", M=M, I=I, O=O, bias=bias, dtype=dtype))


def embedding_case(name, ids, V, E, dtype):
    seed_for(name)
    dt = DTYPES[dtype]
    emb = torch.nn.Embedding(V, E).to(dt)
    ids = torch.tensor(ids, dtype=torch.int64)
    y = emb(ids)
    dy = torch.randn(y.shape, dtype=dt)
    y.backward(dy)
    t = {"ids": ids, "table": emb.weight, "dy": dy, "y": y, "grad.table": emb.weight.grad}
    return write(name, t, dict(kind="embedding", V=V, E=E, dtype=dtype))


def cross_entropy_case(name, M, V, scale, dtype, extreme=False):
    seed_for(name)
    dt = DTYPES[dtype]
    logits = torch.randn(M, V, dtype=torch.float64) * scale
    if extreme:
        # Saturated rows: +-80 everywhere, the target sometimes the loser (huge loss).
        logits = torch.where(torch.rand(M, V) < 0.5, torch.tensor(80.0, dtype=torch.float64),
                             torch.tensor(-80.0, dtype=torch.float64))
        logits[:, 0] = 80.0
        logits[0, 1] = -80.0
    logits = logits.to(dt).requires_grad_(True)
    targets = torch.randint(0, V, (M,), dtype=torch.int64)
    if extreme:
        targets[0] = 1
    loss = F.cross_entropy(logits, targets)
    loss.backward()
    t = {"logits": logits, "targets": targets, "loss": loss.reshape(1).to(torch.float64),
         "grad.logits": logits.grad}
    return write(name, t, dict(kind="cross_entropy", M=M, V=V, dtype=dtype))


# ---------------------------------------------------------------------------- optimizers
def optim_case(name, kind, options, dtype, steps=5):
    """A two-parameter trace: initial values, per-step gradients and lr, values after each
    step (and the optimizer state at the end)."""
    seed_for(name)
    dt = DTYPES[dtype]
    shapes = {"a": (3, 4), "b": (5,)}
    params = {k: torch.randn(s, dtype=dt, requires_grad=True) for k, s in shapes.items()}
    lrs = [0.1, 0.05, 0.2, 0.01, 0.07][:steps]
    t = {f"init.{k}": p.detach().clone() for k, p in params.items()}
    plist = [params["a"], params["b"]]
    if kind in ("adam", "adamw"):
        cls = torch.optim.Adam if kind == "adam" else torch.optim.AdamW
        opt = cls(plist, lr=lrs[0], betas=(options["beta1"], options["beta2"]),
                  eps=options["eps"], weight_decay=options["weight_decay"], foreach=False)
    else:
        opt = torch.optim.SGD(plist, lr=lrs[0], momentum=options["momentum"],
                              dampening=options["dampening"],
                              weight_decay=options["weight_decay"], nesterov=options["nesterov"],
                              foreach=False)
    for s in range(steps):
        for k, p in params.items():
            # Gradients of varied magnitude, some steps large, so that moments differ.
            p.grad = torch.randn(shapes[k], dtype=dt) * (1.0 + 3.0 * (s % 2))
            t[f"grad{s}.{k}"] = p.grad.clone()
        for g in opt.param_groups:
            g["lr"] = lrs[s]
        opt.step()
        for k, p in params.items():
            t[f"after{s}.{k}"] = p.detach().clone()
    t["lr"] = torch.tensor(lrs, dtype=torch.float64)
    return write(name, t, dict(kind=kind, options=options, dtype=dtype, steps=steps))


def clip_case(name, max_norm, dtype):
    seed_for(name)
    dt = DTYPES[dtype]
    shapes = [(4, 3), (7,), (2, 2, 5)]
    ps = [torch.zeros(s, dtype=dt, requires_grad=True) for s in shapes]
    for p in ps:
        p.grad = torch.randn(p.shape, dtype=dt)
    t = {f"grad{i}": p.grad.clone() for i, p in enumerate(ps)}
    norm = torch.nn.utils.clip_grad_norm_(ps, max_norm)
    t["norm"] = norm.reshape(1).to(torch.float64)
    for i, p in enumerate(ps):
        t[f"clipped{i}"] = p.grad.clone()
    return write(name, t, dict(kind="clip", max_norm=max_norm, dtype=dtype, count=len(ps)))


# ---------------------------------------------------------------------------- schedule
def lr_at(base, warmup, total, min_lr, s):
    """The schedule of grux/optim.h (LrSchedule::at) in Python floats."""
    if s < warmup:
        return base * (s + 1) / warmup
    if total <= 0:
        return base
    if s >= total:
        return min_lr
    p = (s - warmup) / max(1, total - warmup)
    return min_lr + (base - min_lr) * (1 + math.cos(math.pi * p)) / 2


SCHEDULES = [
    dict(name="warmup_cosine", base_lr=3e-3, warmup_steps=10, total_steps=100, min_lr=1e-4),
    dict(name="no_warmup", base_lr=1e-2, warmup_steps=0, total_steps=50, min_lr=0.0),
    dict(name="constant", base_lr=2e-3, warmup_steps=5, total_steps=0, min_lr=0.0),
    dict(name="warmup_eq_total", base_lr=1e-3, warmup_steps=20, total_steps=20, min_lr=1e-5),
]


def schedule_file():
    t, cfg = {}, []
    for c in SCHEDULES:
        vals = [lr_at(c["base_lr"], c["warmup_steps"], c["total_steps"], c["min_lr"], s)
                for s in range(120)]
        t["lr." + c["name"]] = torch.tensor(vals, dtype=torch.float64)
        cfg.append(c)
    return write("schedule", t, dict(kind="schedule", schedules=cfg))


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(OUT_DIR, exist_ok=True)
    total = 0
    for dtype in ("f32", "f64"):
        total += linear_case(f"linear_M7_I5_O3_{dtype}", 7, 5, 3, True, dtype)
        total += linear_case(f"linear_M7_I5_O3_nobias_{dtype}", 7, 5, 3, False, dtype)
        total += linear_case(f"linear_M1_I5_O3_{dtype}", 1, 5, 3, True, dtype)
        total += linear_case(f"linear_M19_I33_O17_{dtype}", 19, 33, 17, True, dtype)
        total += embedding_case(f"embedding_repeats_{dtype}",
                                [[1, 4, 1, 9], [0, 4, 4, 10], [1, 1, 7, 3]], 11, 5, dtype)
        total += embedding_case(f"embedding_1d_{dtype}", [2, 2, 2, 0, 5], 6, 19, dtype)
        total += cross_entropy_case(f"ce_M9_V65_{dtype}", 9, 65, 3.0, dtype)
        total += cross_entropy_case(f"ce_M1_V65_{dtype}", 1, 65, 3.0, dtype)
        total += cross_entropy_case(f"ce_extreme80_M6_V65_{dtype}", 6, 65, 0.0, dtype,
                                    extreme=True)
        total += cross_entropy_case(f"ce_large40_M5_V65_{dtype}", 5, 65, 40.0, dtype)
        adam = dict(beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0)
        total += optim_case(f"adam_{dtype}", "adam", adam, dtype)
        total += optim_case(f"adam_l2_{dtype}", "adam",
                            dict(beta1=0.8, beta2=0.95, eps=1e-6, weight_decay=0.1), dtype)
        total += optim_case(f"adamw_{dtype}", "adamw", dict(adam, weight_decay=0.01), dtype)
        sgd = dict(momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False)
        total += optim_case(f"sgd_{dtype}", "sgd", sgd, dtype)
        total += optim_case(f"sgd_momentum_{dtype}", "sgd",
                            dict(sgd, momentum=0.9, dampening=0.1, weight_decay=0.05), dtype)
        total += optim_case(f"sgd_nesterov_{dtype}", "sgd",
                            dict(sgd, momentum=0.9, nesterov=True, weight_decay=0.01), dtype)
        total += clip_case(f"clip_above_{dtype}", 1.0, dtype)
        total += clip_case(f"clip_below_{dtype}", 100.0, dtype)
    total += schedule_file()
    print(f"wrote {len(os.listdir(OUT_DIR))} files, {total} bytes, into {OUT_DIR}")


if __name__ == "__main__":
    main()
