"""The cost model from Python: cost (one problem, as `grux cost` computes it) and profile (a
per-layer table for a torch module, every number from grux's C++ cost model)."""
import collections
import os
import sys

from . import _grux
from ._grux import Error
from ._util import _dtype_name

__all__ = ["cost", "cost_ops", "profile", "Profile", "ProfileRow"]

_MODES = ("seed", "gemm", "mac")


def _default_threads():
    """The cores this process may run on: what `grux cost` predicts for by default."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _threads(threads):
    if threads is None:
        return _default_threads()
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise Error(f"threads: expected an int >= 1 (or None for all cores), got {threads!r}")
    return threads


def _profile_path(path):
    if path is None:
        return ""
    if not isinstance(path, (str, os.PathLike)):
        raise Error(f"profile_path: expected a path or None, got {type(path).__name__}")
    return os.fspath(path)


def cost_ops():
    """The operators grux.cost knows: a list of dicts with name, what (one line), syntax (the
    descriptor's form, e.g. "b{B}i{I}o{O}"), example (a descriptor), and whether the
    operator takes bias=, reset_before= and lengths= (has_bias, has_form, has_lengths)."""
    return _grux.cost_ops()


def cost(op, descriptor, mode="all", train=False, *, dtype="float32", bias=True,
         reset_before=False, lengths=None, threads=None, profile_path=None):
    """The cost model's numbers for one problem, as `grux cost OP DESCRIPTOR` computes them.

    op: an operator of cost_ops() ("gru", "gru_stream", "gru_cell", "lstm", "lstm_stream",
    "lstm_cell", "linear", "conv1d", "conv2d", "mingru", "scan_*", "sigmoid", "tanh",
    "relu"); descriptor: its problem string, e.g. "l2d2t200n32i128h256" (gru, lstm; an LSTM's
    may end in p{P}, its proj_size), "n1i256h256" (gru_cell, lstm_cell), "b32i256o512"
    (linear), "n8c16h64w64d32k3" (conv2d), "n8c16l128d32k3" (conv1d), "n65536"
    (activations). mode: "seed" (every scalar op, unit "ops"), "gemm" (GEMM FLOP, 2 per
    multiply-add, unit "FLOP"), "mac" (multiply-accumulates, unit "MAC") or "all" (the three).
    train: also the backward counts, training memory, traffic and prediction. dtype:
    "float32" or "float64" (bytes count at this size). bias, reset_before: the operator's
    options (only where cost_ops() says it has them). lengths (gru, lstm, mingru): None, a
    specification "uniform:LO:HI:SEED", or a sequence of N ints in [1, T].
    threads: the thread count of the predicted run (None: the cores this process may use).
    profile_path: the machine profile `grux calibrate` wrote; None reads the default one
    ($GRUX_PROFILE, else ~/.config/grux/profile.json) and, when there is none, predicts with
    the C++ preset rates (a conservative stand-in for an uncalibrated machine).

    Returns a flat dict of plain Python values whose keys are the columns of
    `grux cost --format csv`, each ending with its unit: op, problem (the normalised
    descriptor), variant, dtype ("f32"/"f64"), mode; per selected mode forward_matmul_ops,
    forward_bias_ops, forward_elementwise_ops, forward_activation_ops, forward_total_ops (in
    "FLOP" / "MAC" for the other modes), with train also backward_* and training_total_*;
    parameters (scalars), parameter_bytes, inference_activation_bytes (and with train
    training_activation_bytes, gradient_bytes); inference_read/written_reread/cached_bytes
    and the arithmetic intensities per mode; the roofline prediction inference_compute_ms,
    _traffic_ms, _roofline_ms, _overhead_ms, _predicted_ms and _bound ("compute" or
    "traffic"), with train the training_* ones; threads; profile (where the rates came from:
    the profile's path, or "preset (no profile at PATH; run grux calibrate)") and
    profile_machine. Counts and bytes are exact ints.

    Raises grux.Error with the C++ message for an unknown operator (it lists the known
    ones), a malformed descriptor, an option the operator does not have, a count that does
    not fit in 64 bits, or a profile file that is missing or malformed.
    """
    for name, value in (("op", op), ("descriptor", descriptor)):
        if not isinstance(value, str):
            raise Error(f"{name}: expected a str, got {type(value).__name__}")
    if mode not in _MODES + ("all",):
        raise Error(f"mode: {mode!r} is not a count convention (expected seed, gemm, mac or all)")
    modes = list(_MODES) if mode == "all" else [mode]
    d = _grux.cost_report(op, descriptor, modes, bool(train), _dtype_name(dtype), bool(bias),
                          bool(reset_before), lengths, _threads(threads),
                          _profile_path(profile_path))
    d["mode"] = mode
    return d


# ---- The module profiler --------------------------------------------------------------------

ProfileRow = collections.namedtuple("ProfileRow", [
    "name", "type", "problem", "calls", "operations", "gemm_flop", "macs", "parameters",
    "parameter_bytes", "activation_bytes", "predicted_ms", "note"])
ProfileRow.__doc__ = """One layer of a Profile. name: the module's name in named_modules()
("" for the profiled module itself); type: its class; problem: the grux problem it was
costed as ("linear b32i256o512"; several, "; "-joined, when calls had different shapes);
calls: forward calls seen (None on the row of a module's own parameters); operations (seed convention, ops), gemm_flop (FLOP), macs (MAC),
parameters (scalars), parameter_bytes, activation_bytes (inference activations: input and
output, and for the GRU and the LSTM their states), predicted_ms (roofline prediction on this machine),
summed over the calls; None where the cost model does not know the layer (then note says
why, and parameters / parameter_bytes are counted from the module's own parameters)."""

_NUMERIC = ("calls", "operations", "gemm_flop", "macs", "parameters", "parameter_bytes",
            "activation_bytes", "predicted_ms")


class _Unsupported(Exception):
    """A layer (or a configuration of one) the cost model has no operator for."""


def _torch_dtype(t, torch):
    if t == torch.float32:
        return "float32"
    if t == torch.float64:
        return "float64"
    raise _Unsupported(f"dtype {t} (the cost model counts float32 and float64)")


def _pair(v, dims):
    """A conv's per-dimension option as `dims` ints."""
    v = tuple(int(x) for x in v) if isinstance(v, (tuple, list)) else (int(v),)
    return v * dims if len(v) == 1 else v


def _letters(v):
    """One descriptor value: "3", or "3x5" for a height and a width that differ."""
    return str(v[0]) if len(set(v)) == 1 else "x".join(str(x) for x in v)


def _conv_problem(mod, shape, torch, dims):
    """(op, descriptor) of a Conv1d (dims 1) or Conv2d (dims 2) called on `shape`. The
    arithmetic of padding modes other than zeros is the same (only the padded values differ)."""
    k, s, r = _pair(mod.kernel_size, dims), _pair(mod.stride, dims), _pair(mod.dilation, dims)
    if mod.padding == "valid":
        p = (0,) * dims
    elif mod.padding == "same":  # stride 1; PyTorch pads total // 2 before, the rest after
        total = [ri * (ki - 1) for ki, ri in zip(k, r)]
        if any(t % 2 for t in total):
            raise _Unsupported("padding 'same' with an even dilated kernel (asymmetric padding; "
                               "the cost model pads both sides alike)")
        p = tuple(t // 2 for t in total)
    else:
        p = _pair(mod.padding, dims)
    if len(shape) == dims + 1:  # unbatched
        shape = (1,) + tuple(shape)
    n, c = shape[0], shape[1]
    space = f"l{shape[2]}" if dims == 1 else f"h{shape[2]}w{shape[3]}"
    return (f"conv{dims}d", f"n{n}c{c}{space}d{mod.out_channels}k{_letters(k)}s{_letters(s)}"
                            f"p{_letters(p)}r{_letters(r)}g{mod.groups}")


def _layer_problem(mod, call, torch):
    """(op, descriptor, options for cost()) of one forward call of a layer the cost model
    knows; raises _Unsupported for the others. `call`: what the hook recorded."""
    from torch import nn

    from . import torch as grux_torch

    inp = call["input"]
    if inp is None:
        raise _Unsupported("the first input is not a tensor")
    shape, in_dtype = inp["shape"], inp["dtype"]
    lstm = isinstance(mod, (nn.LSTM, grux_torch.LSTM))
    if lstm or isinstance(mod, (nn.GRU, grux_torch.GRU)):
        dtype = _torch_dtype(next(mod.parameters()).dtype, torch)
        lengths = None
        if inp.get("batch_sizes") is not None:  # PackedSequence
            bs = inp["batch_sizes"]
            t, n = len(bs), bs[0]
            lengths = [sum(1 for b in bs if b > j) for j in range(n)]
        elif len(shape) == 2:  # unbatched (T, I)
            t, n = shape[0], 1
        else:
            t, n = (shape[1], shape[0]) if mod.batch_first else (shape[0], shape[1])
        d = 2 if mod.bidirectional else 1
        desc = f"l{mod.num_layers}d{d}t{t}n{n}i{mod.input_size}h{mod.hidden_size}"
        if lstm:
            if mod.proj_size > 0:
                desc += f"p{mod.proj_size}"
            return "lstm", desc, dict(dtype=dtype, bias=bool(mod.bias), lengths=lengths)
        return "gru", desc, dict(dtype=dtype, bias=bool(mod.bias), lengths=lengths,
                                 reset_before=bool(getattr(mod, "reset_before", False)))
    cell = "lstm_cell" if isinstance(mod, (nn.LSTMCell, grux_torch.LSTMCell)) else \
        "gru_cell" if isinstance(mod, (nn.GRUCell, grux_torch.GRUCell)) else None
    if cell is not None:
        dtype = _torch_dtype(mod.weight_ih.dtype, torch)
        n = 1 if len(shape) == 1 else shape[0]
        options = dict(dtype=dtype, bias=bool(mod.bias))
        if cell == "gru_cell":
            options["reset_before"] = bool(getattr(mod, "reset_before", False))
        return cell, f"n{n}i{mod.input_size}h{mod.hidden_size}", options
    if isinstance(mod, nn.Linear):
        dtype = _torch_dtype(mod.weight.dtype, torch)
        rows = 1
        for s in shape[:-1]:
            rows *= s
        return "linear", f"b{rows}i{mod.in_features}o{mod.out_features}", dict(
            dtype=dtype, bias=mod.bias is not None)
    if isinstance(mod, (nn.Conv1d, nn.Conv2d)):
        op, desc = _conv_problem(mod, shape, torch, 1 if isinstance(mod, nn.Conv1d) else 2)
        return op, desc, dict(dtype=_torch_dtype(mod.weight.dtype, torch),
                              bias=mod.bias is not None)
    if isinstance(mod, nn.GELU) and getattr(mod, "approximate", "none") != "none":
        raise _Unsupported(f"GELU(approximate={mod.approximate!r}) (the cost model counts the "
                           "erf form)")
    for cls, op in ((nn.ReLU, "relu"), (nn.Sigmoid, "sigmoid"), (nn.Tanh, "tanh"),
                    (nn.GELU, "gelu"), (nn.SiLU, "silu"), (nn.LeakyReLU, "leaky_relu")):
        if isinstance(mod, cls):
            count = 1
            for s in shape:
                count *= s
            return op, f"n{count}", dict(dtype=_torch_dtype(in_dtype, torch))
    if isinstance(mod, _no_arithmetic(nn)) or (isinstance(mod, nn.modules.dropout._DropoutNd)
                                              and (not mod.training or mod.p == 0)):
        raise _NoArithmetic()
    raise _Unsupported(f"{type(mod).__name__} is not in the cost model")


def _no_arithmetic(nn):
    """Layers that compute nothing: views and copies of their input."""
    return (nn.Identity, nn.Flatten, nn.Unflatten)


class _NoArithmetic(Exception):
    """A layer that computes nothing (a view, or dropout in eval mode): a row of zeros."""


def _describe_input(x, torch):
    """What a hook keeps of a layer's first input: its shape and dtype (not the tensor)."""
    from torch.nn.utils.rnn import PackedSequence

    if isinstance(x, PackedSequence):
        return {"shape": tuple(x.data.shape), "dtype": x.data.dtype,
                "batch_sizes": [int(b) for b in x.batch_sizes]}
    if isinstance(x, torch.Tensor):
        return {"shape": tuple(int(s) for s in x.shape), "dtype": x.dtype}
    return None


def _type_name(mod):
    cls = type(mod)
    if cls.__module__ == "grux.torch":
        return "grux.torch." + cls.__name__
    return cls.__name__


def _own_parameters(mod, recurse):
    params = list(mod.parameters(recurse=recurse))
    return (sum(p.numel() for p in params),
            sum(p.numel() * p.element_size() for p in params))


def _sum(values):
    values = [v for v in values if v is not None]
    return sum(values) if values else None


def profile(module, *example_inputs, threads=None, profile_path=None):
    """A per-layer cost table of a torch module, every number from grux's C++ cost model.

    Runs module(*example_inputs) once under torch.no_grad() (in the module's current
    train/eval mode) with forward hooks on its leaf modules, turns each call's input shape
    into a grux problem and costs it with grux.cost (inference, threads and profile_path as
    there). Known layers: nn.GRU, nn.LSTM, grux.torch.GRU and grux.torch.LSTM
    (PackedSequence inputs count their lengths; an LSTM's proj_size too), nn.GRUCell,
    nn.LSTMCell and their grux.torch versions, nn.Linear, nn.Conv1d and nn.Conv2d (any
    kernel, stride, padding, dilation, groups, with or without bias; padding 'same' where it
    is symmetric), nn.ReLU, nn.Sigmoid, nn.Tanh, nn.GELU (erf form), nn.SiLU, nn.LeakyReLU;
    float32 or float64. Layers that compute nothing (nn.Identity, nn.Flatten, nn.Unflatten,
    dropout in eval mode) get a row of zeros. Any other leaf (and any other configuration)
    gets a row with its parameter count and None elsewhere, with a note saying why; a
    module with children and parameters of its own gets such a row for those parameters.
    A module called several times has one row with the calls summed.

    Returns a Profile: print it for an aligned table with a total row, iterate it for
    ProfileRow namedtuples, len() counts the rows, to_dataframe() gives a pandas DataFrame.
    Raises grux.Error if `module` is not a torch.nn.Module; an exception of the module's own
    forward propagates unchanged (the hooks are removed either way).
    """
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch
        except ImportError:
            raise Error("profile: needs torch, which is not installed") from None
    if not isinstance(module, torch.nn.Module):
        raise Error(f"module: expected a torch.nn.Module, got {type(module).__name__}")
    threads = _threads(threads)
    path = _profile_path(profile_path)
    # Where the rates come from (the same for every row; also checks profile_path).
    label = _grux.cost_report("relu", "n1", ["seed"], False, "float32", True, False, None,
                              threads, path)["profile"]

    modules = list(module.named_modules())
    calls = {id(m): [] for _, m in modules}  # what the hooks saw, per module
    handles = []

    def hook(mod, inputs, output):
        calls[id(mod)].append({"input": _describe_input(inputs[0], torch) if inputs else None})

    try:
        for _, m in modules:
            if not any(True for _ in m.children()):
                handles.append(m.register_forward_hook(hook))
        with torch.no_grad():
            module(*example_inputs)
    finally:
        for h in handles:
            h.remove()

    rows = []
    for name, m in modules:
        leaf = not any(True for _ in m.children())
        if not leaf:
            n, nbytes = _own_parameters(m, recurse=False)
            if n:
                rows.append(ProfileRow(name, _type_name(m), None, None, None, None,
                                       None, n, nbytes, None, None,
                                       "parameters of its own (its children have rows)"))
            continue
        rows.append(_leaf_row(name, m, calls[id(m)], torch, threads, path))
    return Profile(rows, threads, label)


def _leaf_row(name, m, seen, torch, threads, path):
    n_params, param_bytes = _own_parameters(m, recurse=True)
    if not seen:
        return ProfileRow(name, _type_name(m), None, 0, None, None, None, n_params,
                          param_bytes, None, None, "not called by the forward")
    try:
        reports, problems = [], []
        for call in seen:
            op, desc, options = _layer_problem(m, call, torch)
            r = cost(op, desc, "all", threads=threads, profile_path=path, **options)
            reports.append(r)
            problem = f"{r['op']} {r['problem']}"
            if problem not in problems:
                problems.append(problem)
    except _NoArithmetic:
        return ProfileRow(name, _type_name(m), None, len(seen), 0, 0, 0, n_params, param_bytes,
                          0, 0.0, None)
    except (_Unsupported, Error) as e:
        return ProfileRow(name, _type_name(m), None, len(seen), None, None, None, n_params,
                          param_bytes, None, None, str(e))

    def total(key):
        return sum(r[key] for r in reports)

    # Parameters are the layer's, once, however often it is called.
    return ProfileRow(name, _type_name(m), "; ".join(problems), len(seen),
                      total("forward_total_ops"), total("forward_total_FLOP"),
                      total("forward_total_MAC"), reports[0]["parameters"],
                      reports[0]["parameter_bytes"], total("inference_activation_bytes"),
                      total("inference_predicted_ms"), None)


def _fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


class Profile:
    """What grux.profile returns: one ProfileRow per layer (see ProfileRow).

    Attributes: rows (list of ProfileRow), total (a ProfileRow named "total" whose numbers
    are the column sums over the rows, None for a column no row has a number in), threads
    and profile (the thread count and the rates of the predictions). Iterating yields the
    rows (not the total), len() counts them, str() / print() give the aligned table with
    the total row and the notes.
    """

    _HEADERS = ("layer", "type", "grux problem", "calls", "operations (ops)", "GEMM (FLOP)",
                "MACs", "parameters", "param bytes", "activation bytes", "predicted ms")

    def __init__(self, rows, threads, profile):
        self.rows = list(rows)
        self.threads = threads
        self.profile = profile
        sums = {k: _sum(getattr(r, k) for r in self.rows) for k in _NUMERIC}
        self.total = ProfileRow(name="total", type="", problem="", note=None, **sums)

    def __iter__(self):
        return iter(self.rows)

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]

    def to_dataframe(self):
        """The rows as a pandas DataFrame (one row per layer, ProfileRow's fields as columns;
        no total row). Raises ImportError when pandas is not installed."""
        try:
            import pandas
        except ImportError:
            raise ImportError("Profile.to_dataframe needs pandas, which is not installed "
                              "(pip install pandas); the rows are also available as "
                              "namedtuples by iterating the Profile") from None
        return pandas.DataFrame([r._asdict() for r in self.rows], columns=list(ProfileRow._fields))

    def _cells(self, r, notes):
        name = r.name if r.name else "(module)"
        if r.note:
            notes.append(f"[{len(notes) + 1}] {name}: {r.note}")
            name += f" [{len(notes)}]"
        return [name, r.type, _fmt(r.problem)] + [_fmt(getattr(r, k)) for k in _NUMERIC]

    def __str__(self):
        notes = []
        body = [self._cells(r, notes) for r in self.rows]
        total = self._cells(self.total, [])
        grid = [list(self._HEADERS)] + body + [total]
        widths = [max(len(row[i]) for row in grid) for i in range(len(self._HEADERS))]

        def line(cells):
            # Text columns left-aligned, numbers right-aligned.
            return "  ".join(c.ljust(w) if i < 3 else c.rjust(w)
                             for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

        rule = "-" * len(line(grid[0]))
        out = [line(grid[0]), rule] + [line(c) for c in body] + [rule, line(total)]
        out.append(f"(inference; predicted with {self.threads} thread"
                   f"{'' if self.threads == 1 else 's'}, rates from {self.profile})")
        out += notes
        return "\n".join(out)

    def __repr__(self):
        return str(self)
