#!/usr/bin/python3
# PyTorch's outputs, in float64, for the model files of tests/reference/models/files and of
# ../shared/data/realmodels (where it is beside the checkout): the second reference of
# tests/test_model_formats.cpp, beside the formats' own engines' outputs (how those were made:
# tests/reference/models/README.md). Each format is mapped onto torch.nn here, from the JSON,
# independently of grux's readers (the mapping docs/formats.md gives):
#   RTNeural JSON: dense -> nn.Linear (weight = kernel^T); gru -> nn.GRU with Keras's gate
#     blocks z, r, h reordered to r, z, n (bias row 0 -> bias_ih, row 1 -> bias_hh); lstm ->
#     nn.LSTM (weight = kernel^T, gates i, f, c, o as i, f, g, o, bias -> bias_ih, bias_hh 0);
#     prelu, batchnorm ((x - mean) / sqrt(var + eps) * gamma + beta) and activations as written.
#   GuitarML JSON: "rec." -> nn.LSTM / nn.GRU, "lin." -> nn.Linear, plus input[..., :skip].
#   State-dict JSON: the modules in the order of their first keys.
#   .nam (LSTM): per layer W (4H, in + H) -> weight_ih = W[:, :in], weight_hh = W[:, in:],
#     bias -> bias_ih (bias_hh 0), the stored h and c as the initial state; then the head.
# Writes golden/pytorch/<name>.npy (float32, (4800, O)) beside the engines' golden/<name>.npy
# (realmodels/pytorch/ and realmodels/ for the published ones).
# Needs python3-torch and python3-numpy (Debian).
# Usage: /usr/bin/python3 tests/reference/gen_model_golden.py
import json
import os

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "models")
SHARED = os.path.join(HERE, "..", "..", "..", "shared", "data", "realmodels")
D = torch.float64


def t(v):
    return torch.tensor(v, dtype=D)


def keras_gru_order(m, H):  # columns z, r, h -> r, z, n (then transposed by the caller)
    return torch.cat([m[..., H:2 * H], m[..., :H], m[..., 2 * H:]], dim=-1)


def act(name, x):
    return {"tanh": torch.tanh, "relu": torch.relu, "sigmoid": torch.sigmoid,
            "softmax": lambda v: torch.softmax(v, dim=-1),
            "elu": torch.nn.functional.elu}[name](x)


def rtneural(j, x):
    for layer in j["layers"]:
        ty, w, units = layer["type"], layer.get("weights", []), layer["shape"][-1]
        if ty in ("dense", "time-distributed-dense"):
            x = x @ t(w[0]) + (t(w[1]) if len(w) > 1 else 0)
        elif ty == "gru":
            I = len(w[0])
            g = torch.nn.GRU(I, units, dtype=D)
            with torch.no_grad():
                g.weight_ih_l0.copy_(keras_gru_order(t(w[0]), units).T)
                g.weight_hh_l0.copy_(keras_gru_order(t(w[1]), units).T)
                b = t(w[2])
                g.bias_ih_l0.copy_(keras_gru_order(b[0], units))
                g.bias_hh_l0.copy_(keras_gru_order(b[1], units))
                x = g(x[:, None, :])[0][:, 0, :]
        elif ty == "lstm":
            I = len(w[0])
            m = torch.nn.LSTM(I, units, dtype=D)
            with torch.no_grad():
                m.weight_ih_l0.copy_(t(w[0]).T)
                m.weight_hh_l0.copy_(t(w[1]).T)
                m.bias_ih_l0.copy_(t(w[2]))
                m.bias_hh_l0.zero_()
                x = m(x[:, None, :])[0][:, 0, :]
        elif ty == "prelu":
            a = t(w[0][0])
            x = torch.where(x >= 0, x, a * x)
        elif ty == "batchnorm":
            gamma, beta, mean, var = (w if len(w) == 4 else [1.0, 0.0] + w)
            x = (x - t(mean)) / torch.sqrt(t(var) + layer["epsilon"]) * t(gamma) + t(beta)
        elif ty != "activation":
            raise ValueError("unsupported layer " + ty)
        if layer.get("activation"):
            if ty in ("gru", "lstm"):
                assert layer["activation"] == "tanh"
            else:
                x = act(layer["activation"], x)
    return x


def state_dict_modules(sd, prefixes, x):
    for p in prefixes:
        if p + "weight_hh_l0" in sd:
            hh = np.array(sd[p + "weight_hh_l0"])
            H = hh.shape[1]
            L = 0
            while "%sweight_ih_l%d" % (p, L) in sd:
                L += 1
            lstm = hh.shape[0] == 4 * H
            I = np.array(sd[p + "weight_ih_l0"]).shape[1]
            bias = p + "bias_ih_l0" in sd
            m = (torch.nn.LSTM if lstm else torch.nn.GRU)(I, H, num_layers=L, bias=bias, dtype=D)
            with torch.no_grad():
                for k, v in m.named_parameters():
                    v.copy_(t(sd[p + k]))
                x = m(x[:, None, :])[0][:, 0, :]
        else:
            x = x @ t(sd[p + "weight"]).T + (t(sd[p + "bias"]) if p + "bias" in sd else 0)
    return x


def nam(j, x):
    c = j["config"]
    I, H, L = c["input_size"], c["hidden_size"], c["num_layers"]
    w = t(j["weights"])
    at = 0

    def take(n):
        nonlocal at
        at += n
        return w[at - n:at]
    for layer in range(L):
        i = I if layer == 0 else H
        W = take(4 * H * (i + H)).reshape(4 * H, i + H)
        b = take(4 * H)
        h0, c0 = take(H), take(H)
        m = torch.nn.LSTM(i, H, dtype=D)
        with torch.no_grad():
            m.weight_ih_l0.copy_(W[:, :i])
            m.weight_hh_l0.copy_(W[:, i:])
            m.bias_ih_l0.copy_(b)
            m.bias_hh_l0.zero_()
            x = m(x[:, None, :], (h0[None, None, :], c0[None, None, :]))[0][:, 0, :]
    O = c.get("out_channels", 1)
    hw = take(O * H).reshape(O, H)
    hb = take(O)
    assert at == len(w)
    return x @ hw.T + hb


def run(path):
    with open(path) as f:
        j = json.load(f, object_pairs_hook=dict)
    if "layers" in j:
        return rtneural, j
    if "model_data" in j:
        return "guitarml", j
    if "architecture" in j:
        return nam, j
    return "state_dict", j


def output(path):
    kind, j = run(path)
    if kind == "guitarml":
        I = j["model_data"]["input_size"]
    elif kind == "state_dict":
        I = np.array(next(v for k, v in j.items() if k.endswith("weight_ih_l0") or
                          k.endswith("weight"))).shape[1]
    elif kind is nam:
        I = j["config"]["input_size"]
    else:
        I = j["in_shape"][-1]
    x = t(np.load(os.path.join(MODELS, "golden", "signal_i%d.npy" % I)).astype(np.float64))
    with torch.no_grad():
        if kind == "guitarml":
            y = state_dict_modules(j["state_dict"], ["rec.", "lin."], x)
            skip = j["model_data"].get("skip", 0)
            y = y + x[:, :skip] if skip else y
        elif kind == "state_dict":
            prefixes = []
            for k in j:
                p = k[:k.rfind(".") + 1]
                if p not in prefixes:
                    prefixes.append(p)
            y = state_dict_modules(j, prefixes, x)
        else:
            y = kind(j, x)
    return y.numpy().astype(np.float32)


def main():
    for d in ("pytorch", os.path.join("realmodels", "pytorch")):
        os.makedirs(os.path.join(MODELS, "golden", d), exist_ok=True)
    files = os.path.join(MODELS, "files")
    for name in sorted(os.listdir(files)):
        if name.startswith("rtneural_bad"):
            continue  # a hostile file: refused
        if name.startswith("gen_keras"):
            continue  # Keras's reset_after=False GRU has no torch.nn twin: gen_model_files.py
        out = os.path.join(MODELS, "golden", "pytorch", os.path.splitext(name)[0] + ".npy")
        np.save(out, output(os.path.join(files, name)))
        print(out)
    if os.path.isdir(SHARED):
        for d in sorted(os.listdir(SHARED)):
            folder = os.path.join(SHARED, d)
            # Those the engines ran (the others are copies of files/).
            if not os.path.exists(os.path.join(MODELS, "golden", "realmodels", d + ".npy")):
                continue
            f = [n for n in os.listdir(folder) if n.endswith((".json", ".nam"))][0]
            out = os.path.join(MODELS, "golden", "realmodels", "pytorch", d + ".npy")
            np.save(out, output(os.path.join(folder, f)))
            print(out)


if __name__ == "__main__":
    main()
