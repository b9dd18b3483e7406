"""The character-level GRU or LSTM language model of `grux train`, written in PyTorch.

Same model (embedding -> GRU -> Linear -> cross-entropy), same data layout (the text split into
N contiguous streams; window w holds positions [w*T, w*T+T) of each stream, targets one later;
the hidden state carried across windows and reset when the pass over the data wraps), same
learning-rate schedule and update order (clip, then the optimizer at the scheduled rate).
Used by gen_lm_golden.py (golden loss traces) and bench/pytorch_lm.py (speed comparison).
"""

import math

import torch
import torch.nn.functional as F

# Validation runs up to this many streams, whatever the training batch (grux's kValStreams).
VAL_STREAMS = 64


class CharLm(torch.nn.Module):
    def __init__(self, vocab, embed, hidden, layers, dropout=0.0, cell="gru"):
        super().__init__()
        self.embedding = torch.nn.Embedding(vocab, embed)
        self.cell, self.layers = cell, layers
        rnn = torch.nn.LSTM if cell == "lstm" else torch.nn.GRU
        setattr(self, cell, rnn(embed, hidden, layers, dropout=dropout))  # gru.* or lstm.* keys
        self.fc = torch.nn.Linear(hidden, vocab)

    def forward(self, ids, targets, h):
        """ids, targets (T, N) int64; h (L, N, H), or for the LSTM h and c stacked (2L, N, H)
        as grux carries them. Returns (mean loss, new state)."""
        x = self.embedding(ids)
        if self.cell == "lstm":
            L = self.layers
            y, (h_n, c_n) = self.lstm(x, (h[:L].contiguous(), h[L:].contiguous()))
            h_n = torch.cat([h_n, c_n])
        else:
            y, h_n = self.gru(x, h)
        logits = self.fc(y.reshape(-1, y.shape[-1]))
        return F.cross_entropy(logits, targets.reshape(-1)), h_n


def encode(text):
    vocab = sorted(set(text))
    index = {c: i for i, c in enumerate(vocab)}
    return vocab, [index[c] for c in text]


def split(ids, val_fraction):
    n_val = int(math.floor(len(ids) * val_fraction))
    return ids[: len(ids) - n_val], ids[len(ids) - n_val:]


class Batches:
    def __init__(self, ids, N, T):
        self.ids = torch.tensor(ids, dtype=torch.int64)
        self.N, self.T = N, T
        self.stream_len = len(ids) // N
        self.windows = (self.stream_len - 1) // T
        assert self.windows >= 1, "text too short"

    def window(self, w):
        starts = torch.arange(self.N) * self.stream_len + w * self.T
        pos = starts[None, :] + torch.arange(self.T)[:, None]  # (T, N)
        return self.ids[pos], self.ids[pos + 1]


def lr_at(step, base, warmup, total, min_lr):
    if step < warmup:
        return base * (step + 1) / warmup
    if total <= 0:
        return base
    if step >= total:
        return min_lr
    p = (step - warmup) / max(1, total - warmup)
    return min_lr + (base - min_lr) * (1 + math.cos(math.pi * p)) / 2


def make_optimizer(model, name, weight_decay=0.0, momentum=0.9):
    params = model.parameters()
    if name == "adam":
        return torch.optim.Adam(params, lr=1.0, weight_decay=weight_decay)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1.0, weight_decay=weight_decay)
    return torch.optim.SGD(params, lr=1.0, momentum=momentum, weight_decay=weight_decay)


def train_step(model, opt, batches, step, h, lr, clip):
    """One step as grux's Trainer::step; returns (loss, new carried state)."""
    w = step % batches.windows
    if w == 0:
        h = torch.zeros_like(h)
    ids, targets = batches.window(w)
    loss, h_n = model(ids, targets, h)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    for g in opt.param_groups:
        g["lr"] = lr
    opt.step()
    return loss.item(), h_n.detach()


@torch.no_grad()
def evaluate(model, batches, layers, hidden, dtype):
    rows = 2 * layers if model.cell == "lstm" else layers
    h = torch.zeros(rows, batches.N, hidden, dtype=dtype)
    total = 0.0
    for w in range(batches.windows):
        ids, targets = batches.window(w)
        loss, h = model(ids, targets, h)
        total += loss.item()
    return total / batches.windows
