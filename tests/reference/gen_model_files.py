#!/usr/bin/python3
# Writes model files for the options the published ones leave out (tests/reference/models/files/
# gen_*): RTNeural JSON with every layer type and activation grux reads (dense with and without
# bias, prelu with one alpha per feature and one for all, batch norm with and without its affine
# part, relu, elu, sigmoid, softmax, tanh) around a GRU, over 2 inputs; RTNeural JSON with a
# Keras GRU of reset_after=False (one bias: grux's reset_before form, which RTNeural cannot
# read) and an LSTM; GuitarML JSON with a GRU of 3 layers over 3 inputs without skip; a .nam LSTM
# of NAM's default size (3 layers of 18) with stored states. Seeded: the same files every run.
# Their engines' outputs were made as tests/reference/models/README.md says; for the
# reset_after=False file, whose engine cannot read it, this script writes the reference itself
# from Keras's equations in float64 (golden/gen_keras_gru_reset_before.npy).
# Needs python3-numpy. Usage: /usr/bin/python3 tests/reference/gen_model_files.py
import json
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = os.path.join(HERE, "models", "files")
GOLDEN = os.path.join(HERE, "models", "golden")
rng = np.random.default_rng(61)


def u(*shape, scale=0.5):  # 4 decimals: short files
    return np.round(rng.uniform(-scale, scale, size=shape), 4)


def layer(ty, units, weights, activation="", **extra):
    d = {"type": ty, "activation": activation, "shape": [None, None, units],
         "weights": [w.tolist() for w in weights]}
    d.update(extra)
    return d


def write(name, obj):
    with open(os.path.join(FILES, name), "w") as f:
        json.dump(obj, f)


def every_layer():
    H = 5
    layers = [
        layer("dense", 6, [u(2, 6), u(6)], "relu"),
        layer("prelu", 6, [u(1, 6)]),
        layer("batchnorm", 6, [u(6) + 1, u(6), u(6), np.abs(u(6)) + 0.5], epsilon=0.001),
        layer("gru", H, [u(6, 3 * H), u(H, 3 * H), u(2, 3 * H, scale=0.1)], "tanh"),
        layer("batchnorm", H, [u(H), np.abs(u(H)) + 0.5], epsilon=0.01),
        layer("time-distributed-dense", 4, [u(H, 4)], "elu"),
        layer("prelu", 4, [np.array([[0.2]])]),
        layer("dense", 4, [u(4, 4), u(4)], "sigmoid"),
        layer("activation", 4, [], "tanh"),
        layer("dense", 3, [u(4, 3), u(3)], "softmax"),
        layer("dense", 1, [u(3, 1), u(1)]),
    ]
    write("gen_rtneural_every_layer.json", {"in_shape": [None, None, 2], "layers": layers})


def keras_reset_before():
    H = 6
    k, r, b = u(1, 3 * H), u(H, 3 * H), u(3 * H, scale=0.2)
    dk, db = u(H, 1), u(1)
    lk, lr, lb = u(H, 4 * 4), u(4, 4 * 4), u(4 * 4, scale=0.2)
    ok, ob = u(4, 1), u(1)
    write("gen_keras_gru_reset_before.json", {"in_shape": [None, None, 1], "layers": [
        layer("gru", H, [k, r, b], "tanh"),
        layer("lstm", 4, [lk, lr, lb], "tanh"),
        layer("dense", 1, [ok, ob])]})
    # Keras's equations (reset_after=False; gates z, r, h; LSTM i, f, c, o), float64.
    x = np.load(os.path.join(GOLDEN, "signal_i1.npy")).astype(np.float64)
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    h, hl, cl = np.zeros(H), np.zeros(4), np.zeros(4)
    y = np.zeros((len(x), 1))
    for t in range(len(x)):
        xz, xr, xh = np.split(x[t] @ k + b, 3)
        rz, rr, rh = r[:, :H], r[:, H:2 * H], r[:, 2 * H:]
        z = sig(xz + h @ rz)
        rg = sig(xr + h @ rr)
        hh = np.tanh(xh + (rg * h) @ rh)
        h = z * h + (1 - z) * hh
        g = h @ lk + hl @ lr + lb
        i, f, c, o = sig(g[:4]), sig(g[4:8]), np.tanh(g[8:12]), sig(g[12:])
        cl = f * cl + i * c
        hl = o * np.tanh(cl)
        y[t] = hl @ ok + ob
    os.makedirs(os.path.join(GOLDEN, "pytorch"), exist_ok=True)
    np.save(os.path.join(GOLDEN, "gen_keras_gru_reset_before.npy"), y.astype(np.float32))
    np.save(os.path.join(GOLDEN, "pytorch", "gen_keras_gru_reset_before.npy"),
            y.astype(np.float32))


def guitarml_gru3():
    H, I, L = 7, 3, 3
    sd = {}
    for layer_index in range(L):
        inp = I if layer_index == 0 else H
        sd["rec.weight_ih_l%d" % layer_index] = u(3 * H, inp).tolist()
        sd["rec.weight_hh_l%d" % layer_index] = u(3 * H, H).tolist()
        sd["rec.bias_ih_l%d" % layer_index] = u(3 * H, scale=0.1).tolist()
        sd["rec.bias_hh_l%d" % layer_index] = u(3 * H, scale=0.1).tolist()
    sd["lin.weight"] = u(1, H).tolist()
    sd["lin.bias"] = u(1).tolist()
    write("gen_guitarml_gru3_i3.json", {"model_data": {
        "model": "SimpleRNN", "input_size": I, "skip": 0, "output_size": 1, "unit_type": "GRU",
        "num_layers": L, "hidden_size": H, "bias_fl": True}, "state_dict": sd})


def nam_3x18():
    H, L = 18, 3
    w = []
    for layer_index in range(L):
        inp = 1 if layer_index == 0 else H
        w += u(4 * H, inp + H, scale=0.3).ravel().tolist() + u(4 * H, scale=0.1).tolist()
        w += u(H, scale=0.2).tolist() + u(H, scale=0.2).tolist()  # stored h, c
    w += u(H).tolist() + u(1).tolist()
    obj = {"version": "0.5.4", "metadata": {"name": "grux generated 3x18"},
           "architecture": "LSTM", "config": {"input_size": 1, "hidden_size": H,
                                               "num_layers": L},
           "weights": w, "sample_rate": 44100}
    with open(os.path.join(FILES, "gen_nam_lstm_3x18.nam"), "w") as f:
        json.dump(obj, f)


if __name__ == "__main__":
    every_layer()
    keras_reset_before()
    guitarml_gru3()
    nam_3x18()
