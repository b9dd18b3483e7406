"""grux.load (model files: RTNeural JSON, GuitarML JSON, .nam, safetensors) and
grux.torch.from_file: outputs against the formats' own engines (tests/reference/models), a
stream split any way against the whole signal, the torch module against grux.load's numbers
and its gradients, errors as grux.Error."""
import os

import numpy as np
import pytest
import torch

import grux
import grux.torch as gt

MODELS = os.path.join(os.path.dirname(__file__), "..", "reference", "models")
FILES = os.path.join(MODELS, "files")


def _signal(inputs):
    return np.load(os.path.join(MODELS, "golden", "signal_i%d.npy" % inputs))


def _golden(name):
    return np.load(os.path.join(MODELS, "golden", name + ".npy"))


def _within(got, want, k=1.0):
    assert got.shape == want.shape, (got.shape, want.shape)
    r = np.abs(got.astype(np.float64) - want) / (1e-5 + 1e-4 * np.abs(want))
    assert r.max() <= k, (r.max(), int(r.argmax()))


@pytest.mark.parametrize("name", ["rtneural_gru", "rtneural_dense", "rtneural_lstm_torch",
                                  "neuralseed_gru7_ts9", "nam_core_lstm"])
def test_load_matches_the_engine(name):
    path = os.path.join(FILES, name + (".nam" if name.startswith("nam") else ".json"))
    m = grux.load(path)
    x = _signal(m.input_size)
    y = m.process(x)
    _within(y, _golden(name))
    # Frame blocks of 13 through a stream: the same bits as the whole signal.
    s = m.stream()
    parts = [s.step(x[t:t + 13]) for t in range(0, len(x), 13)]
    assert np.array_equal(np.concatenate(parts), y)
    s.reset()
    assert np.array_equal(s.step(x[:100]), y[:100])


def test_what_the_file_says():
    m = grux.load(os.path.join(FILES, "nam_core_lstm.nam"))
    assert (m.format, m.sample_rate, m.name, m.input_size, m.output_size) == \
        ("nam", 48000, "Test LSTM", 1, 1)
    assert [layer["kind"] for layer in m.layers] == ["lstm", "dense"]
    assert m.layers[0]["tensors"]["h0"].shape == (3,)
    g = grux.load(os.path.join(FILES, "neuralseed_gru4_ts9.json"))
    assert g.format == "guitarml-json" and g.skip == 1
    assert "gru" in repr(g)


def test_batch_and_torch_tensors():
    m = grux.load(os.path.join(FILES, "rtneural_lstm.json"))
    x = _signal(1)[:300]
    one = m.process(x)
    both = m.process(torch.from_numpy(np.stack([x, x], axis=1)))
    assert isinstance(both, torch.Tensor) and tuple(both.shape) == (300, 2, 1)
    assert np.abs(both.numpy()[:, 1] - one).max() < 1e-6


def test_save_round_trip(tmp_path):
    m = grux.load(os.path.join(FILES, "rtneural_gru.json"))
    out = str(tmp_path / "m.safetensors")
    m.save(out)
    back = grux.load(out)
    x = _signal(1)[:500]
    assert back.format == "safetensors"
    assert np.array_equal(back.process(x), m.process(x))


@pytest.mark.parametrize("name", ["rtneural_gru.json", "nam_core_lstm.nam",
                                  "neuralseed_gru4_ts9.json", "rtneural_dense.json"])
def test_torch_module_has_the_same_numbers(name):
    path = os.path.join(FILES, name)
    module = gt.from_file(path)
    m = grux.load(path)
    x = _signal(m.input_size)[:600]
    with torch.no_grad():
        y = module(torch.from_numpy(x)).numpy()
    _within(y, m.process(x).astype(np.float64))
    # Trainable: the gradient of a loss reaches the recurrent weights.
    xt = torch.from_numpy(x).requires_grad_(True)
    module(xt).square().sum().backward()
    assert xt.grad is not None and torch.isfinite(xt.grad).all()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in module.parameters())


def test_sample_rate_correction_and_warm_up():
    m = grux.load(os.path.join(FILES, "rtneural_gru.json"))
    x = _signal(1)
    s = m.stream(sample_rate=96000)
    assert s.rate_ratio == 2
    want = np.load(os.path.join(MODELS, "golden", "rate", "gru_nointerp2.npy"))
    _within(s.step(x), want.astype(np.float64))
    w = m.stream(warmup_frames=200)
    plain = m.stream()
    plain.step(np.zeros((200, 1), np.float32))
    assert np.array_equal(w.step(x[:100]), plain.step(x[:100]))
    with pytest.raises(grux.Error, match="correction"):
        m.stream(sample_rate=96000, correction="cubic")


def test_errors_are_grux_errors(tmp_path):
    with pytest.raises(grux.Error, match="layer 0 \\(lstm\\)"):
        grux.load(os.path.join(FILES, "rtneural_bad_lstm.json"))
    bad = tmp_path / "m.json"
    bad.write_text('{"in_shape": [null, 1], "layers": [{"type": "conv1d", "shape": [null, 4]}]}')
    with pytest.raises(grux.Error, match="conv1d"):
        grux.load(str(bad))
    with pytest.raises(grux.Error, match="cannot open"):
        grux.load(str(tmp_path / "missing.nam"))
    m = grux.load(os.path.join(FILES, "nam_core_lstm.nam"))
    with pytest.raises(grux.Error, match="expected \\(T, 1\\)"):
        m.process(np.zeros((10, 2), np.float32))
    with pytest.raises(grux.Error, match="expected \\(t, 1, 1\\)"):
        m.stream().step(np.zeros((10, 3), np.float32))


ONNX = os.path.join(os.path.dirname(__file__), "..", "reference", "onnx")


def _onnx_golden(case, name):
    return np.load(os.path.join(ONNX, "golden", "%s.%s.npy" % (case, name)))


@pytest.mark.parametrize("case,given", [
    ("torch_lstm_bidirectional_2layers", []),
    ("helper_gru_sequence_lens_h0", ["sequence_lens", "initial_h"]),
    ("helper_lstm_weights_as_inputs", ["W", "R", "B"]),
])
def test_onnx_graph_outputs_by_name(case, given):
    inputs = {n: _onnx_golden(case, n) for n in given}
    m = grux.load(os.path.join(ONNX, "files", case + ".onnx"), inputs=inputs)
    assert m.format == "onnx"
    frames = _onnx_golden(case, m.graph_input)
    outs = m.run(frames)
    assert list(outs) == m.graph_outputs
    for name, y in outs.items():
        _within(y, _onnx_golden(case, name).astype(np.float64))
    # float64 frames give float64 outputs of the same values.
    outs64 = m.run(frames.astype(np.float64))
    for name, y in outs64.items():
        assert y.dtype == np.float64
        assert np.array_equal(y.astype(np.float32), outs[name])


def test_onnx_inputs_missing_or_wrong_are_grux_errors():
    with pytest.raises(grux.Error, match='graph input "W": is not the frames'):
        grux.load(os.path.join(ONNX, "files", "helper_lstm_weights_as_inputs.onnx"))
    m = grux.load(os.path.join(FILES, "nam_core_lstm.nam"))
    with pytest.raises(grux.Error, match="not read from a graph"):
        m.run(np.zeros((4, 1), np.float32))
    bi = grux.load(os.path.join(ONNX, "files", "torch_gru_bidirectional_2layers.onnx"))
    with pytest.raises(grux.Error, match="is bidirectional, which needs the whole sequence"):
        bi.stream(1)


EXPORTABLE = ["rtneural_gru.json", "rtneural_lstm_torch.json", "gen_rtneural_every_layer.json",
              "gen_guitarml_gru3_i3.json", "gen_keras_gru_reset_before.json", "nam_core_lstm.nam",
              "gen_nam_lstm_3x18.nam"]
EXPORTABLE_ONNX = [("torch_lstm_bidirectional_2layers", []), ("helper_gru_clip", []),
                   ("helper_lstm_layout1_peepholes_bidirectional", ["P"]),
                   ("helper_lstm_clip_input_forget", []), ("helper_gru_reverse", []),
                   ("torch_lstm_tanh_skip", [])]


@pytest.mark.parametrize("path,given", [(os.path.join(FILES, f), []) for f in EXPORTABLE] +
                         [(os.path.join(ONNX, "files", c + ".onnx"), g) for c, g in EXPORTABLE_ONNX])
def test_save_onnx_is_valid_onnx_and_reads_back_to_the_same_bits(path, given, tmp_path):
    import onnx

    case = os.path.basename(path)[:-len(".onnx")]
    m = grux.load(path, inputs={n: _onnx_golden(case, n) for n in given})
    out = str(tmp_path / "model.onnx")
    m.save_onnx(out)
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)  # shapes inferred through every node
    assert model.opset_import[0].version >= 14
    ops = [n.op_type for n in model.graph.node]
    rec = sum(1 for layer in m.layers if layer["kind"] in ("gru", "lstm"))
    assert ops.count("GRU") + ops.count("LSTM") == rec
    back = grux.load(out)
    x = np.random.default_rng(1).uniform(-1, 1, (40, 2, m.input_size)).astype(np.float32)
    assert np.array_equal(back.process(x), m.process(x))
    assert np.array_equal(back.run(x)["y"], m.process(x))
