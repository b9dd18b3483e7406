"""Times the character-level GRU language model of `grux train` in PyTorch.

  /usr/bin/python3 bench/pytorch_lm.py train --threads K [--layers L --hidden H --embed E
                                         --batch N --window T --steps S]
  /usr/bin/python3 bench/pytorch_lm.py generate --threads K [--length C ...]

train: the same model, data layout, optimizer (Adam), clipping and schedule as grux (see
tests/reference/torch_char_lm.py); the first 3 steps are warm-up, the rest are timed.
generate: PyTorch's per-character step loop (embedding, one GRU step, linear, softmax
sampling with torch.multinomial), as a user would write it. Prints one JSON line.
"""

import argparse
import json
import os
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import torch_char_lm as lm  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["train", "generate"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--embed", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--length", type=int, default=2000)
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "tinyshakespeare.txt"))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    with open(a.data, encoding="utf-8") as f:
        text = f.read()
    vocab, ids = lm.encode(text)
    model = lm.CharLm(len(vocab), a.embed, a.hidden, a.layers)
    if a.mode == "train":
        train_ids, _ = lm.split(ids, 0.1)
        batches = lm.Batches(train_ids, a.batch, a.window)
        opt = lm.make_optimizer(model, "adam")
        h = torch.zeros(a.layers, a.batch, a.hidden)
        warm = 3
        for s in range(warm + a.steps):
            if s == warm:
                t0 = time.perf_counter()
            loss, h = lm.train_step(model, opt, batches, s, h, 1e-3, 1.0)
        dt = time.perf_counter() - t0
        tokens = a.steps * a.batch * a.window
        print(json.dumps({"tool": "pytorch", "mode": "train", "threads": a.threads,
                          "tokens_per_s": tokens / dt, "ms_per_step": dt / a.steps * 1e3}))
    else:
        model.eval()
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():
            x = torch.tensor([[vocab.index("\n")]])
            h = torch.zeros(a.layers, 1, a.hidden)
            out = []
            t0 = time.perf_counter()
            for _ in range(a.length):
                y, h = model.gru(model.embedding(x), h)
                probs = torch.softmax(model.fc(y[0, 0]) / 0.8, dim=-1)
                nxt = torch.multinomial(probs, 1, generator=gen)
                out.append(vocab[nxt.item()])
                x = nxt.view(1, 1)
            dt = time.perf_counter() - t0
        print(json.dumps({"tool": "pytorch", "mode": "generate", "threads": a.threads,
                          "chars_per_s": a.length / dt}))


if __name__ == "__main__":
    main()
