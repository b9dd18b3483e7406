#!/usr/bin/env python3
"""Writes golden training traces of the character-level language model, GRU and LSTM
(tests/test_lm.cpp).

Each file tests/reference/golden/lm/<case>.safetensors holds the initial weights
(model.<name>), the loss of every training step (loss.train, f64), the validation loss after the
last step (loss.val), and the run's settings as metadata. grux replays the run from the same
initial weights and must match every loss (f64: 1e-8, f32: 1e-4).
Run with Debian's python3-torch: /usr/bin/python3 tests/reference/gen_lm_golden.py
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_gru_golden import safetensors_bytes  # noqa: E402
import torch_char_lm as lm  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "..", "data", "tinyshakespeare.txt")
OUT = os.path.join(HERE, "golden", "lm")

CASES = [
    # name, dtype, layers, embed, hidden, batch, window, steps, optimizer, lr, warmup, clip, wd,
    # cell
    ("adam_f64_l2", torch.float64, 2, 12, 24, 4, 16, 30, "adam", 1e-2, 5, 1.0, 0.0, "gru"),
    ("adam_f32_l2", torch.float32, 2, 12, 24, 4, 16, 30, "adam", 1e-2, 5, 1.0, 0.0, "gru"),
    ("adamw_f64_l1", torch.float64, 1, 8, 20, 3, 11, 25, "adamw", 5e-3, 0, 0.5, 0.1, "gru"),
    ("sgd_f64_l1", torch.float64, 1, 8, 20, 5, 9, 25, "sgd", 0.5, 3, 0.0, 1e-3, "gru"),
    ("lstm_adam_f64_l2", torch.float64, 2, 12, 24, 4, 16, 30, "adam", 1e-2, 5, 1.0, 0.0, "lstm"),
    ("lstm_adam_f32_l2", torch.float32, 2, 12, 24, 4, 16, 30, "adam", 1e-2, 5, 1.0, 0.0, "lstm"),
    ("lstm_sgd_f64_l1", torch.float64, 1, 8, 20, 5, 9, 25, "sgd", 0.5, 3, 0.0, 1e-3, "lstm"),
]
TEXT_CHARS = 6000
VAL_FRACTION = 0.1
MIN_LR_FRACTION = 0.1
SEED = 7


def main():
    os.makedirs(OUT, exist_ok=True)
    with open(CORPUS, encoding="utf-8") as f:
        text = f.read()[:TEXT_CHARS]
    vocab, ids = lm.encode(text)
    train_ids, val_ids = lm.split(ids, VAL_FRACTION)
    for name, dtype, L, E, H, N, T, steps, opt_name, lr, warmup, clip, wd, cell in CASES:
        torch.manual_seed(SEED)
        model = lm.CharLm(len(vocab), E, H, L, cell=cell).to(dtype)
        init = {f"model.{k}": v.clone() for k, v in model.state_dict().items()}
        opt = lm.make_optimizer(model, opt_name, weight_decay=wd, momentum=0.9)
        train = lm.Batches(train_ids, N, T)
        val = lm.Batches(val_ids, min(lm.VAL_STREAMS, len(val_ids) // (T + 1)), T)
        h = torch.zeros(2 * L if cell == "lstm" else L, N, H, dtype=dtype)
        losses = []
        for s in range(steps):
            rate = lm.lr_at(s, lr, warmup, steps, lr * MIN_LR_FRACTION)
            loss, h = lm.train_step(model, opt, train, s, h, rate, clip)
            losses.append(loss)
        val_loss = lm.evaluate(model, val, L, H, dtype)
        tensors = dict(init)
        tensors["loss.train"] = torch.tensor(losses, dtype=torch.float64)
        tensors["loss.val"] = torch.tensor([val_loss], dtype=torch.float64)
        meta = {
            "text_chars": TEXT_CHARS, "val_fraction": VAL_FRACTION, "dtype": str(dtype)[6:],
            "layers": L, "embed": E, "hidden": H, "batch": N, "window": T, "steps": steps,
            "optimizer": opt_name, "lr": repr(lr), "min_lr": repr(lr * MIN_LR_FRACTION),
            "warmup": warmup, "clip": repr(clip), "weight_decay": repr(wd), "momentum": "0.9",
            "cell": cell, "torch": torch.__version__,
        }
        path = os.path.join(OUT, f"{name}.safetensors")
        with open(path, "wb") as f:
            f.write(safetensors_bytes(tensors, meta))
        print(f"{name}: losses {losses[0]:.6f} .. {losses[-1]:.6f}, val {val_loss:.6f} -> {path}")


if __name__ == "__main__":
    main()
