#!/usr/bin/python3
# Writes the example models into data/example/: an nn.GRU's weights (`grux demo`'s model) and
# an nn.LSTM's of the same sizes, an input signal, and PyTorch's outputs for it. Needs Debian's python3-torch; run with /usr/bin/python3.
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_gru_golden import safetensors_bytes  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data", "example")
T, N, I, H, L = 200, 4, 16, 64, 2


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    gru = torch.nn.GRU(I, H, num_layers=L)
    # A sensor-like input: each channel a sine of its own frequency and phase, plus a ramp.
    t = np.arange(T, dtype=np.float64)[:, None, None]
    n = np.arange(N, dtype=np.float64)[None, :, None]
    i = np.arange(I, dtype=np.float64)[None, None, :]
    x = np.sin(2 * math.pi * t * (0.01 + 0.005 * i) + 0.7 * n) + 0.002 * t - 0.2
    x = x.astype(np.float32)
    with torch.no_grad():
        y, _ = gru(torch.from_numpy(x))
    os.makedirs(OUT, exist_ok=True)
    weights = {k: v.detach() for k, v in gru.state_dict().items()}
    with open(os.path.join(OUT, "gru.safetensors"), "wb") as f:
        f.write(safetensors_bytes(weights, {"note": "nn.GRU(16, 64, num_layers=2), torch.manual_seed(0)"}))
    np.save(os.path.join(OUT, "input.npy"), x)
    np.save(os.path.join(OUT, "expected_output.npy"), y.numpy())
    torch.manual_seed(1)
    lstm = torch.nn.LSTM(I, H, num_layers=L)
    with torch.no_grad():
        y, _ = lstm(torch.from_numpy(x))
    weights = {k: v.detach() for k, v in lstm.state_dict().items()}
    with open(os.path.join(OUT, "lstm.safetensors"), "wb") as f:
        f.write(safetensors_bytes(weights, {"note": "nn.LSTM(16, 64, num_layers=2), torch.manual_seed(1)"}))
    np.save(os.path.join(OUT, "expected_lstm_output.npy"), y.numpy())
    print("wrote", OUT)


if __name__ == "__main__":
    main()
