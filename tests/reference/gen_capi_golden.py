#!/usr/bin/python3
# Writes the golden files of the C API's test (tests/test_capi.cpp) into golden/capi/: real-time
# models as a plugin stores them, a state_dict with an nn.GRU under "rnn." and an nn.Linear
# head under "fc.", and PyTorch's outputs for one input.
#   model_residual: GRU(3, 6, num_layers=2) + Linear(6, 3), output = x + fc(rnn(x))
#   model_plain:    GRU(4, 5), no head (prefix "rnn."), and an unrelated "other.w" key
#   model_lstm_proteus: LSTM(1, 40) + Linear(40, 1), output = x + fc(rnn(x)) (GuitarML's shape)
#   model_lstm_nam:     LSTM(1, 18, num_layers=3) + Linear(18, 1) (the Neural Amp Modeler's)
#   model_lstm_proj:    LSTM(2, 8, proj_size=3) + Linear(3, 2)
# Each file also holds "input" (T, N, I) and "expected" (T, N, O) at the top level (the C API
# reads only the keys under its prefixes). Needs Debian's python3-torch; run with
# /usr/bin/python3.
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_gru_golden import safetensors_bytes  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden", "capi")
T, N = 37, 2


def write(name, tensors, note):
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, name + ".safetensors"), "wb") as f:
        f.write(safetensors_bytes(tensors, {"note": note}))


def main():
    torch.set_num_threads(1)
    torch.manual_seed(3)
    rnn = torch.nn.GRU(3, 6, num_layers=2)
    fc = torch.nn.Linear(6, 3)
    x = torch.randn(T, N, 3)
    with torch.no_grad():
        y = x + fc(rnn(x)[0])
    t = {"rnn." + k: v.detach() for k, v in rnn.state_dict().items()}
    t.update({"fc." + k: v.detach() for k, v in fc.state_dict().items()})
    t["input"], t["expected"] = x, y
    write("model_residual", t, "GRU(3, 6, num_layers=2) + Linear(6, 3), x + fc(rnn(x)), seed 3")

    torch.manual_seed(4)
    rnn = torch.nn.GRU(4, 5)
    x = torch.randn(T, N, 4)
    with torch.no_grad():
        y = rnn(x)[0]
    t = {"rnn." + k: v.detach() for k, v in rnn.state_dict().items()}
    t["other.w"] = torch.zeros(2)
    t["input"], t["expected"] = x, y
    write("model_plain", t, "GRU(4, 5), no head, seed 4")

    for name, seed, (I, H, L, P), residual, note in (
            ("model_lstm_proteus", 5, (1, 40, 1, 0), True, "LSTM(1, 40) + Linear(40, 1), x + fc(rnn(x))"),
            ("model_lstm_nam", 6, (1, 18, 3, 0), False, "LSTM(1, 18, num_layers=3) + Linear(18, 1)"),
            ("model_lstm_proj", 7, (2, 8, 1, 3), False, "LSTM(2, 8, proj_size=3) + Linear(3, 2)")):
        torch.manual_seed(seed)
        rnn = torch.nn.LSTM(I, H, num_layers=L, proj_size=P)
        fc = torch.nn.Linear(P or H, I if residual or I == 2 else 1)
        x = torch.randn(T, N, I)
        with torch.no_grad():
            y = fc(rnn(x)[0]) + (x if residual else 0)
        t = {"rnn." + k: v.detach() for k, v in rnn.state_dict().items()}
        t.update({"fc." + k: v.detach() for k, v in fc.state_dict().items()})
        t["input"], t["expected"] = x, y
        write(name, t, f"{note}, seed {seed}")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
