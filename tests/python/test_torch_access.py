"""grux._torch_access: torch tensors read and made through libtorch (python/src/torch_access.h).

What the per-frame fast path reads of a tensor must be the same through libtorch as through
the tensor's Python attributes, for every kind of tensor it may meet; results made by libtorch
must be ordinary torch tensors with the same values; and where torch's C++ headers are
installed (Debian's libtorch-dev, which scripts/install-deps.sh installs) the module must be
built and in use, so that a build that silently lost it fails here."""
import glob
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import grux  # noqa: E402
from grux import _grux  # noqa: E402


def _headers_installed():
    import torch.utils.cpp_extension as ce
    return any(os.path.exists(os.path.join(p, "torch/csrc/autograd/python_variable.h"))
               for p in ce.include_paths())


def _module_shipped():
    return bool(glob.glob(os.path.join(os.path.dirname(grux.__file__), "_torch_access*.so")))


def test_the_module_is_built_and_used_where_torch_headers_are_installed():
    if not _headers_installed():
        pytest.skip("torch's C++ headers (libtorch-dev) are not installed")
    assert _module_shipped(), "grux._torch_access was not built although libtorch-dev is installed"
    import grux._torch_access as ta
    assert ta.torch_version == torch.__version__
    assert _grux._torch_access() is True


def _tensors():
    base = torch.rand(6, 1, 4)
    grad = torch.rand(2, 3).requires_grad_()
    yield "2-d", torch.rand(2, 3)
    yield "1-d f64", torch.rand(5, dtype=torch.float64)
    yield "3-d", torch.rand(2, 3, 4)
    yield "a row of a larger tensor (offset)", base[3]
    yield "transposed (not contiguous)", torch.rand(3, 2).t()
    yield "expanded (stride 0)", torch.rand(1, 4).expand(3, 4)
    yield "4-d", torch.rand(1, 1, 2, 2)
    yield "0-d", torch.tensor(1.5)
    yield "empty", torch.empty(0, 3)
    yield "int64", torch.arange(6).reshape(2, 3)
    yield "float16", torch.rand(2, 3).half()
    yield "requires grad", grad
    yield "a view of one that requires grad", grad[1:]
    yield "a Parameter (a subclass)", torch.nn.Parameter(torch.rand(2, 3))
    yield "meta", torch.empty(2, 3, device="meta")
    yield "sparse", torch.rand(2, 3).to_sparse()


_CASES = list(_tensors())


@pytest.mark.parametrize("name,t", _CASES, ids=[n for n, _ in _CASES])
def test_the_fast_path_reads_tensors_as_their_attributes_say(name, t):
    if not _grux._torch_access():
        pytest.skip("grux._torch_access is not in use here")
    try:
        fast = _grux._raw_array(t)
        _grux._torch_access(False)
        slow = _grux._raw_array(t)
    finally:
        _grux._torch_access(True)
    assert fast == slow, name
    if fast is not None:
        assert fast[2] == t.data_ptr() and fast[1] == tuple(t.shape)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("batch", [0, 2])
def test_stream_results_are_the_same_through_libtorch_and_attributes(dtype, batch):
    """Frames, blocks and `out` through both paths: the same bits, torch results."""
    gru = grux.GRU(3, 5, dtype=dtype)
    tdt = getattr(torch, dtype)
    shape = (3,) if batch == 0 else (batch, 3)
    frames = torch.rand(7, *shape, dtype=tdt) * 2 - 1
    outs = {}
    for use in (True, False):
        _grux._torch_access(use)
        try:
            st = grux.GRUStream(gru, batch=batch)
            ys = [st.step(frames[i]) for i in range(4)]
            o = torch.empty(ys[0].shape, dtype=tdt)
            ys.append(st.step(frames[4], out=o).clone())
            ys.append(st.process(frames[5:]))
        finally:
            _grux._torch_access(True)
        for y in ys:
            assert isinstance(y, torch.Tensor) and y.dtype == tdt and y.is_contiguous()
        outs[use] = [y.numpy() for y in ys]
    for a, b in zip(outs[True], outs[False]):
        np.testing.assert_array_equal(a, b)


def test_a_result_made_by_libtorch_is_an_ordinary_tensor():
    st = grux.GRUStream(grux.GRU(2, 3), batch=1)
    y = st.step(torch.rand(1, 2))
    assert y.requires_grad is False and y.device.type == "cpu"
    y.add_(1)  # writable, owns its memory: outlives the stream
    del st
    assert torch.isfinite(y).all()
    with pytest.raises(grux.Error, match="out: expected"):
        grux.GRUStream(grux.GRU(2, 3), batch=1).step(torch.rand(1, 2), out=torch.empty(1, 4))


def test_a_sparse_tensor_is_refused_in_one_line():
    st = grux.GRUStream(grux.GRU(3, 2), batch=2)
    for call in (lambda: st.step(torch.rand(2, 3).to_sparse()),
                 lambda: grux.GRU(3, 2)(torch.rand(4, 2, 3).to_sparse())):
        with pytest.raises(grux.Error, match=r"layout torch.sparse_coo was given; expected a dense"):
            call()


def test_refused_under_another_torch_version():
    """Built for one torch, the module refuses to load under another (tensor layouts are not a
    stable ABI): everything then takes the attribute path, with torch results as before."""
    if not _module_shipped():
        pytest.skip("grux._torch_access is not built here")
    import subprocess
    import sys
    code = ("import torch; torch.__version__ = '0.0.0-other'\n"
            "import grux, grux._grux as g\n"
            "y = grux.GRUStream(grux.GRU(3, 4), batch=1).step(torch.rand(1, 3))\n"
            "print(g._torch_access(), type(y).__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=os.path.dirname(os.path.dirname(grux.__file__)))
    assert out.stdout.split() == ["False", "Tensor"], out.stdout + out.stderr
