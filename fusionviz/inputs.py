"""Inputs for verification, benchmark and tune: what the user said, and what fusionviz chose.

The same :class:`InputPlan` drives verify, bench and tune, so every variant sees identical data.

What the user can say (:class:`InputSpec`; CLI flags and the Model page):

- ``--shape NAME=d1,d2,...``: concrete dims for an input. ``NAME`` may hold any character
  (``serving_default_input_2:0``, ``x/y``, spaces): the text is split at its last ``=``.
- ``--input NAME=VALUE``: one value for an input (a scalar such as a sample rate, or a fill).
- ``--inputs FILE.npz|.npy``: the user's own data (an extra verification input set).

What fusionviz chooses where the model leaves it open (:func:`plan_inputs`):

1. Dims with the same symbolic name take the same value across inputs (``batch``, ``seq``).
2. A batch dim (dim 0 of a tensor of rank >= 2, or a dim named like ``batch``/``N``) is 1.
3. An image (rank 4, 1/3/4 channels fixed in NCHW or NHWC): a free spatial dim is 224, or
   equal to the other spatial dim when that one is fixed (an OCR line of height 48 is 48x48).
4. A dim named like ``seq``/``len``/``token`` is 32.
5. The samples of a rank-2 float input (audio) are 16000 (one second at 16 kHz).
6. Any other free dim is 1.
7. A scalar integer input that the model compares with a constant (``Equal(sr, 16000)``)
   takes that constant; integer inputs that index a table (``Gather``) stay below its size;
   inputs named like ``mask`` are all ones.

When some dim or value was chosen, :func:`probe` runs the original model once on the chosen
inputs (in the isolated child); if it fails, the next candidates of the chosen dims are tried
(e.g. 224 -> 320 -> 640 -> 48 -> 32, 32 -> 128 -> 512) before giving up with a line that names the
inputs and the flag that sets them.

Input sets (:meth:`InputPlan.input_sets`): ``normal`` (seeded standard normal), ``zeros``
(silence: floats and ints 0, masks 1), ``edge`` (large magnitudes: +-255 and uniform in
[-255, 255]; indices at their largest valid value), and ``user`` when data was given.
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from fusionviz import errors

DEFAULT_SEQ_LEN = 32
DEFAULT_IMAGE = 224
DEFAULT_AUDIO = 16000
INT_HIGH = 2
MAX_INPUT_ELEMENTS = 50_000_000
#: Bytes all inputs of one input set may take together (checked before any pass runs).
MAX_INPUT_MB = float(os.environ.get("FUSIONVIZ_MAX_INPUT_MB", "1024") or 1024)
EDGE = 255.0
SET_NAMES = ("normal", "zeros", "edge")

_NP = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.DOUBLE: np.float64,
    onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.INT32: np.int32,
    onnx.TensorProto.INT16: np.int16,
    onnx.TensorProto.INT8: np.int8,
    onnx.TensorProto.UINT8: np.uint8,
    onnx.TensorProto.UINT16: np.uint16,
    onnx.TensorProto.UINT32: np.uint32,
    onnx.TensorProto.UINT64: np.uint64,
    onnx.TensorProto.BOOL: np.bool_,
}

# Candidates per kind of chosen dim: the first is the default, the others are tried in order
# when the original model does not run with it (see probe).
_CANDIDATES = {
    "batch": (1,),
    "image": (DEFAULT_IMAGE, 320, 640, 48, 32),  # 48: the line height of OCR recognizers
    "seq": (DEFAULT_SEQ_LEN, 128, 512, 16),
    "audio": (DEFAULT_AUDIO, 512, 1024, 4096),
    "other": (1, 16, 64, 256, 1024),
}
_BATCH_NAMES = re.compile(r"^(n|b|bs|batch.*|.*_batch|.*batch_size.*|unk__\d+_batch)$", re.I)
_SEQ_NAMES = re.compile(r"seq|len|token|time|frame|step|position", re.I)


# --------------------------------------------------------------------------- what the user says


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """What the user said about the inputs. ``key()`` is a hashable cache key."""

    shapes: Mapping[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    values: Mapping[str, float | int | bool] = dataclasses.field(default_factory=dict)
    data: Mapping[str, np.ndarray] | None = None
    data_label: str = ""  # file name of the data, for messages

    def key(self) -> tuple:
        data = None
        if self.data:
            data = tuple(sorted((k, v.dtype.str, v.shape, hash(v.tobytes())) for k, v in self.data.items()))
        return (tuple(sorted((k, tuple(v)) for k, v in self.shapes.items())),
                tuple(sorted(self.values.items())), data)

    @property
    def empty(self) -> bool:
        return not self.shapes and not self.values and not self.data


def _split_last(text: str, flag: str, example: str) -> tuple[str, str]:
    """``NAME=REST`` split at the last ``=`` (names may hold ``:``, ``/`` and spaces)."""
    if "=" in text:
        name, _, rest = text.rpartition("=")
    elif ":" in text:  # the older NAME:dims form, for names without ':'
        name, _, rest = text.rpartition(":")
    else:
        name, rest = "", ""
    if not name.strip() or not rest.strip():
        raise errors.InputSpecError(f"{flag} '{text}' is not NAME=VALUE (e.g. {example}).")
    return name.strip(), rest.strip()


def parse_shape_arg(text: str) -> tuple[str, list[int]]:
    """Parse ``NAME=1,3,224,224`` (also ``NAME=1x3x224x224``); NAME may hold any character."""
    name, rest = _split_last(text or "", "--shape", "--shape input=1,3,224,224")
    parts = [d for d in re.split(r"[,x\s]+", rest) if d]
    if not parts or not all(re.fullmatch(r"\d+", d) for d in parts):
        raise errors.InputSpecError(f"--shape '{text}': dims must be positive integers (e.g. {name}=1,3,224,224).")
    dims = [int(d) for d in parts]
    if any(d <= 0 or d > 1_000_000 for d in dims):
        raise errors.InputSpecError(f"--shape '{text}': dims must be positive integers up to 1,000,000.")
    return name, dims


def parse_value_arg(text: str) -> tuple[str, float | int | bool]:
    """Parse ``NAME=VALUE`` where VALUE is an integer, a float or true/false."""
    name, rest = _split_last(text or "", "--input", "--input sr=16000")
    low = rest.lower()
    if low in ("true", "false"):
        return name, low == "true"
    try:
        return name, int(rest)
    except ValueError:
        pass
    try:
        value = float(rest)
    except ValueError:
        raise errors.InputSpecError(f"--input '{text}': the value must be a number or true/false.") from None
    return name, value


def load_data(data: bytes, filename: str, model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The user's inputs from a ``.npz`` (arrays named like the inputs) or a ``.npy`` (a
    model with one input). No pickles. Names, dtypes and shapes are checked against the model."""
    label = os.path.basename(filename) or "the inputs file"
    expected = graph_inputs(model)
    try:
        if filename.lower().endswith(".npy"):
            arr = np.load(io.BytesIO(data), allow_pickle=False)
            if len(expected) != 1:
                raise errors.InputSpecError(
                    f"{label} holds one array but the model has {len(expected)} inputs "
                    f"({', '.join(vi.name for vi in expected)}); use a .npz with one array per input name.")
            feeds = {expected[0].name: arr}
        else:
            npz = np.load(io.BytesIO(data), allow_pickle=False)
            feeds = {k: npz[k] for k in npz.files}
    except errors.FusionvizError:
        raise
    except Exception as exc:  # noqa: BLE001 - zip, format and pickle errors
        raise errors.InputSpecError(f"Could not read {label} as .npz/.npy: {' '.join(str(exc).split())[:200]}.") from None
    names = [vi.name for vi in expected]
    unknown = sorted(set(feeds) - set(names))
    if unknown:
        raise errors.InputSpecError(
            f"{label} has arrays {unknown} that are not inputs of the model; its inputs are: {', '.join(names)}.")
    by_name = {vi.name: vi for vi in expected}
    out = {}
    for k, arr in feeds.items():
        out[k] = _check_data(by_name[k], arr, label)
    return out


def _check_data(vi: onnx.ValueInfoProto, arr: np.ndarray, label: str) -> np.ndarray:
    dtype = _NP.get(vi.type.tensor_type.elem_type)
    if dtype is None:
        raise errors.InputSpecError(f"Input '{vi.name}' has a type fusionviz cannot feed.")
    want = np.dtype(dtype)
    if arr.dtype != want:
        same_kind = (np.issubdtype(arr.dtype, np.floating) and np.issubdtype(want, np.floating)) or (
            np.issubdtype(arr.dtype, np.integer) and np.issubdtype(want, np.integer))
        if not same_kind:
            raise errors.InputSpecError(
                f"{label}: array '{vi.name}' is {arr.dtype} but the input is {want}.")
        arr = arr.astype(want)
    declared = declared_dims(vi)
    if declared is not None:
        if len(declared) != arr.ndim:
            raise errors.InputSpecError(
                f"{label}: array '{vi.name}' has shape {list(arr.shape)}, the input has rank {len(declared)} "
                f"({_fmt_declared(declared)}).")
        for i, (d, n) in enumerate(zip(declared, arr.shape, strict=True)):
            if isinstance(d, int) and d != n:
                raise errors.InputSpecError(
                    f"{label}: array '{vi.name}' has shape {list(arr.shape)} but dim {i} of the input is fixed at {d} "
                    f"({_fmt_declared(declared)}).")
    return arr


# --------------------------------------------------------------------------- the plan


@dataclasses.dataclass(frozen=True)
class InputChoice:
    """One graph input: its concrete dims and how they were chosen."""

    name: str
    dtype: str  # numpy dtype name
    declared: tuple[int | str | None, ...] | None  # None: no shape declared
    dims: tuple[int, ...]
    chosen: tuple[tuple[int, str], ...] = ()  # (dim index, kind) of dims fusionviz picked
    value: float | int | bool | None = None  # one value for every element, when fixed
    value_note: str = ""  # where the value came from
    high: int | None = None  # integer inputs: values in [0, high)
    is_mask: bool = False

    @property
    def is_free_scalar(self) -> bool:
        """A scalar integer with no value given or inferred (a sample rate, a count)."""
        return not self.dims and self.value is None and np.issubdtype(np.dtype(self.dtype), np.integer)

    def describe(self) -> str:
        """``x float32[1,3,224,224] (dims 2,3 chosen; set with --shape x=...)``."""
        text = f"{self.name}: {self.dtype}[{','.join(str(d) for d in self.dims)}]"
        notes = []
        if self.chosen:
            which = ",".join(str(i) for i, _ in self.chosen)
            notes.append(f"dim {which} chosen (declared {_fmt_declared(self.declared)}); "
                         f"set with --shape {self.name}={','.join(str(d) for d in self.dims)}")
        if self.value is not None:
            notes.append(f"value {self.value} ({self.value_note})")
        elif self.high is not None and self.high != INT_HIGH:
            notes.append(f"values in [0, {self.high})")
        return text + (f"  ({'; '.join(notes)})" if notes else "")


@dataclasses.dataclass(frozen=True)
class InputPlan:
    """Concrete inputs for a model; ``feeds(kind)`` makes one input set."""

    choices: tuple[InputChoice, ...]
    user_data: Mapping[str, np.ndarray] | None = None
    probed: bool = False  # the original model ran on these inputs (see probe)

    def shapes(self) -> dict[str, list[int]]:
        return {c.name: list(c.dims) for c in self.choices}

    def values(self) -> dict[str, float | int | bool]:
        return {c.name: c.value for c in self.choices if c.value is not None}

    @property
    def has_choices(self) -> bool:
        """Whether fusionviz chose a dim or a value (then :func:`fusionviz.verify.probe` checks it)."""
        return any(c.chosen or c.value_note.startswith("the value the model") or c.is_free_scalar
                   for c in self.choices)

    def describe_lines(self) -> list[str]:
        return [c.describe() for c in self.choices]

    def nbytes(self) -> int:
        return sum(int(np.prod(c.dims, dtype=np.float64)) * np.dtype(c.dtype).itemsize for c in self.choices)

    def feeds(self, kind: str = "normal", seed: int = 0) -> dict[str, np.ndarray]:
        """One input set: ``normal`` (seeded), ``zeros``, ``edge`` or ``user``."""
        if kind == "user":
            base = self.feeds("normal", seed)
            base.update(self.user_data or {})
            return base
        rng = np.random.default_rng(seed)
        return {c.name: _make_array(c, kind, rng) for c in self.choices}

    def input_sets(self) -> list[tuple[str, dict[str, np.ndarray]]]:
        """The verification input sets, ``user`` last when the user gave data."""
        sets = [(k, self.feeds(k)) for k in SET_NAMES]
        if self.user_data:
            sets.append(("user", self.feeds("user")))
        return sets

    def _schedule(self) -> list[dict[str, int]]:
        """Candidate index per kind of chosen dim, in the order :func:`probe` tries them: the
        defaults; then the sized kinds (image, seq, audio) moving together; then the other
        free dims alone (they are often a batch that must match another input's)."""
        kinds = {kind for c in self.choices for _, kind in c.chosen}
        sized = [k for k in ("image", "seq", "audio") if k in kinds]
        steps = [dict.fromkeys(kinds, 0)]
        for i in range(1, max((len(_CANDIDATES[k]) for k in sized), default=1)):
            steps.append({**dict.fromkeys(kinds, 0), **{k: i for k in sized}})
        if "other" in kinds:
            for i in range(1, len(_CANDIDATES["other"])):
                steps.append({**dict.fromkeys(kinds, 0), "other": i})
        return steps

    def with_candidate(self, k: int) -> InputPlan:
        """The plan at step ``k`` of the probe schedule (dims of one name move together)."""
        step = self._schedule()[k]
        choices = []
        for c in self.choices:
            dims = list(c.dims)
            for i, kind in c.chosen:
                if step[kind]:  # step 0 is the plan's own choice (an image side paired with a fixed one)
                    cands = _CANDIDATES[kind]
                    dims[i] = cands[min(step[kind], len(cands) - 1)]
            choices.append(dataclasses.replace(c, dims=tuple(dims)))
        return dataclasses.replace(self, choices=tuple(choices))

    def candidates(self) -> int:
        """How many candidate plans :meth:`with_candidate` can make."""
        return len(self._schedule())


def _make_array(c: InputChoice, kind: str, rng: np.random.Generator) -> np.ndarray:
    dtype = np.dtype(c.dtype)
    dims = list(c.dims)
    if c.value is not None:
        return np.full(dims, c.value, dtype=dtype)
    if c.is_mask:
        return np.ones(dims, dtype=dtype)
    if dtype == np.bool_:
        if kind == "zeros":
            return np.zeros(dims, dtype=dtype)
        if kind == "edge":
            return np.ones(dims, dtype=dtype)
        return rng.integers(0, 2, size=dims).astype(dtype)
    if np.issubdtype(dtype, np.floating):
        if kind == "zeros":
            return np.zeros(dims, dtype=dtype)
        if kind == "edge":
            uniform = rng.uniform(-EDGE, EDGE, size=dims)
            picks = rng.choice(np.array([-EDGE, -1.0, 0.0, 1.0, EDGE]), size=dims)
            return np.where(rng.random(size=dims) < 0.5, picks, uniform).astype(dtype)
        return rng.standard_normal(dims).astype(dtype)
    high = c.high if c.high is not None else INT_HIGH
    if kind == "zeros":
        return np.zeros(dims, dtype=dtype)
    if kind == "edge":
        return np.full(dims, max(high - 1, 0), dtype=dtype)
    return rng.integers(0, max(high, 1), size=dims).astype(dtype)


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def if_switches(model: onnx.ModelProto, *, hops: int = 4) -> list[str]:
    """Scalar graph inputs an ``If`` of the main graph picks its branch by (within ``hops``
    nodes of its condition): silero's sample rate. Freezing one (``--freeze NAME=VALUE``) lets
    the If fold to one branch, which compilers that cannot convert the If then accept."""
    producer = {o: n for n in model.graph.node for o in n.output if o}
    scalars = {vi.name for vi in graph_inputs(model)
               if (dims := declared_dims(vi)) is not None and all(d == 1 for d in dims)
               and vi.type.tensor_type.elem_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                                                          onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16)}
    found: list[str] = []
    for node in model.graph.node:
        if node.op_type != "If" or not node.input:
            continue
        frontier, seen = [node.input[0]], set()
        for _ in range(hops + 1):
            nxt = []
            for name in frontier:
                if name in seen:
                    continue
                seen.add(name)
                if name in scalars and name not in found:
                    found.append(name)
                if name in producer:
                    nxt.extend(i for i in producer[name].input if i)
            frontier = nxt
    return found


def declared_dims(vi: onnx.ValueInfoProto) -> tuple[int | str | None, ...] | None:
    """Declared dims: ints where fixed, the symbolic name (or None) where free; None: no shape."""
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    out: list[int | str | None] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value") and d.dim_value > 0:
            out.append(int(d.dim_value))
        else:
            out.append(d.dim_param or None)
    return tuple(out)


def _fmt_declared(declared) -> str:
    if declared is None:
        return "no shape"
    return "[" + ", ".join("?" if d is None else str(d) for d in declared) + "]"


def _dim_kind(declared: tuple, i: int, is_float: bool) -> str:
    """Which default a free dim gets (module docstring, rules 2-6)."""
    d = declared[i]
    rank = len(declared)
    name = d if isinstance(d, str) else ""
    if name and _BATCH_NAMES.match(name):
        return "batch"
    if i == 0 and rank >= 2:
        return "batch"
    if rank == 4 and is_float:
        nchw = isinstance(declared[1], int) and declared[1] in (1, 3, 4)
        nhwc = isinstance(declared[3], int) and declared[3] in (1, 3, 4)
        if (nchw and i in (2, 3)) or (nhwc and not nchw and i in (1, 2)):
            return "image"
    if name and _SEQ_NAMES.search(name):
        return "seq"
    if rank == 2 and is_float and i == 1:
        return "audio"
    if not is_float and rank in (1, 2) and i == rank - 1:
        return "seq"
    return "other"


def _image_pair(declared: tuple, i: int) -> int | None:
    """The fixed size of the other spatial dim of an image input, if any (rule 3)."""
    nchw = isinstance(declared[1], int) and declared[1] in (1, 3, 4)
    pair = ((2, 3) if nchw else (1, 2))
    other = pair[1] if i == pair[0] else pair[0]
    d = declared[other]
    return d if isinstance(d, int) else None


def _consumers(model: onnx.ModelProto) -> dict[str, list[onnx.NodeProto]]:
    out: dict[str, list[onnx.NodeProto]] = {}
    for n in model.graph.node:
        for i in n.input:
            if i:
                out.setdefault(i, []).append(n)
    return out


def _constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    from onnx import numpy_helper

    out = {t.name: t for t in model.graph.initializer}
    arrays: dict[str, np.ndarray] = {}
    for n in model.graph.node:
        if n.op_type == "Constant" and n.output and n.attribute:
            for a in n.attribute:
                if a.name == "value" and a.HasField("t"):
                    out[n.output[0]] = a.t
    for name, t in out.items():
        try:
            if int(np.prod(t.dims, dtype=np.float64)) <= 16:
                arrays[name] = numpy_helper.to_array(t)
            else:
                arrays[name] = np.empty(tuple(t.dims), dtype=np.uint8)  # shape only
        except Exception:  # noqa: BLE001 - external or odd data: unknown
            continue
    return arrays


def _int_facts(name: str, consumers, consts) -> tuple[int | float | None, int | None, str]:
    """(value, high, note) for an integer input: a compared constant, an index bound (rule 7)."""
    frontier = [name]
    seen = set()
    high = None
    while frontier:  # follow Cast/Unsqueeze/Squeeze/Reshape, which keep the values
        v = frontier.pop()
        if v in seen:
            continue
        seen.add(v)
        for n in consumers.get(v, ()):
            if n.op_type in ("Cast", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Identity"):
                frontier.extend(n.output[:1])
            elif n.op_type == "Equal":
                other = n.input[1] if n.input[0] == v else n.input[0]
                c = consts.get(other)
                if c is not None and c.size == 1 and c.dtype != np.uint8:
                    value = c.reshape(()).item()
                    return value, None, f"the value the model compares it with; change with --input {name}=VALUE"
            elif n.op_type == "Gather" and len(n.input) > 1 and n.input[1] == v:
                table = consts.get(n.input[0])
                if table is not None and table.ndim >= 1:
                    axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
                    size = table.shape[axis]
                    high = size if high is None else min(high, size)
    return None, high, ""


def plan_inputs(model: onnx.ModelProto, spec: InputSpec | None = None) -> InputPlan:
    """Concrete dims and value rules for every graph input (module docstring).

    Raises:
        fusionviz.errors.InputSpecError: a flag names an unknown input, contradicts a fixed dim,
            or the inputs would be too large (checked here, before any pass runs).
    """
    spec = spec or InputSpec()
    vis = graph_inputs(model)
    names = [vi.name for vi in vis]
    known = ", ".join(repr(n) for n in names) or "none"
    for flag, given in (("--shape", spec.shapes), ("--input", spec.values)):
        for k in given:
            if k not in names:
                raise errors.InputSpecError(f"{flag} names input '{k}', but the model's inputs are: {known}.")
    consumers = _consumers(model)
    consts = _constants(model) if any(
        vi.type.tensor_type.elem_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                                              onnx.TensorProto.DOUBLE) for vi in vis) else {}
    by_param: dict[str, int] = {}  # rule 1
    choices = []
    for vi in vis:
        if not vi.type.HasField("tensor_type"):
            raise errors.InputSpecError(f"Input '{vi.name}' is not a tensor; fusionviz feeds tensors only.")
        elem = vi.type.tensor_type.elem_type
        dtype = _NP.get(elem)
        if dtype is None:
            raise errors.InputSpecError(
                f"Input '{vi.name}' has type {onnx.TensorProto.DataType.Name(elem)}, which fusionviz cannot generate.")
        declared = declared_dims(vi)
        is_float = np.issubdtype(dtype, np.floating)
        chosen: list[tuple[int, str]] = []
        user = spec.data.get(vi.name) if spec.data else None
        if vi.name in spec.shapes:
            dims = [int(d) for d in spec.shapes[vi.name]]
            if declared is not None:
                if len(declared) != len(dims):
                    raise errors.InputSpecError(
                        f"--shape {vi.name} has {len(dims)} dims but the input has rank {len(declared)} "
                        f"({_fmt_declared(declared)}).")
                for i, (d, g) in enumerate(zip(declared, dims, strict=True)):
                    if isinstance(d, int) and d != g:
                        raise errors.InputSpecError(
                            f"--shape {vi.name}: dim {i} is fixed at {d} by the model ({_fmt_declared(declared)}), not {g}.")
        elif user is not None:
            dims = list(user.shape)
        elif declared is None:
            if vi.name in spec.values:
                dims = []
            else:
                raise errors.InputSpecError(
                    f"Input '{vi.name}' has no declared shape; give one with --shape {vi.name}=d1,d2,...")
        else:
            dims = []
            for i, d in enumerate(declared):
                if isinstance(d, int):
                    dims.append(d)
                    continue
                if isinstance(d, str) and d in by_param:
                    dims.append(by_param[d])
                    continue
                kind = _dim_kind(declared, i, is_float)
                value = _CANDIDATES[kind][0]
                if kind == "image":
                    pair = _image_pair(declared, i)
                    if pair is not None:
                        value = pair
                        kind = "other" if pair != DEFAULT_IMAGE else kind
                dims.append(value)
                if kind != "batch":
                    chosen.append((i, kind))
                if isinstance(d, str):
                    by_param[d] = value
        n = int(np.prod(dims, dtype=np.float64)) if dims else 1
        if n > MAX_INPUT_ELEMENTS:
            what = (f"Input '{vi.name}' would have {n:,} elements (shape {dims}, declared "
                    f"{_fmt_declared(declared)})")
            raise errors.InputSpecError(f"{what}; give a smaller --shape {vi.name}=...",
                                        page=f"{what}. {_page_fix(vi.name, declared)}")
        value = spec.values.get(vi.name)
        note = "given with --input" if value is not None else ""
        high = None
        if not is_float and dtype is not np.bool_:
            v2, high, n2 = _int_facts(vi.name, consumers, consts)
            if value is None and v2 is not None and not dims:
                value, note = v2, n2
        if value is not None and dtype is not np.bool_:
            value = dtype(value).item()
        choices.append(InputChoice(vi.name, np.dtype(dtype).name, declared, tuple(dims), tuple(chosen),
                                   value, note, high, "mask" in vi.name.lower() and not is_float))
    plan = InputPlan(tuple(choices), dict(spec.data) if spec.data else None)
    mb = plan.nbytes() / 2**20
    if mb > MAX_INPUT_MB:
        biggest = max(plan.choices, key=lambda c: int(np.prod(c.dims, dtype=np.float64)))
        what = (f"The inputs would take {mb:,.0f} MB (limit {MAX_INPUT_MB:g} MB, FUSIONVIZ_MAX_INPUT_MB); "
                f"'{biggest.name}' has shape {list(biggest.dims)}")
        raise errors.InputSpecError(f"{what}: give a smaller --shape {biggest.name}=...",
                                    page=f"{what}. {_page_fix(biggest.name, biggest.declared)}")
    return plan


def _page_fix(name: str, declared: tuple | None) -> str:
    """What to do about an input that is too large, in the app's words (no command-line flag)."""
    free = [d if isinstance(d, str) and d else f"{name}[{i}]"
            for i, d in enumerate(declared or ()) if not isinstance(d, int)]
    if not free:
        return "The model fixes all its dims, so fusionviz cannot make inputs for it."
    return (f"Set a smaller size for {', '.join(free)} under Inputs on the Model page "
            "(fusionviz's choice follows the model's other dims).")


# --------------------------------------------------------------------------- older entry points


def resolve_dims(vi: onnx.ValueInfoProto, shapes: Mapping[str, Sequence[int]] | None = None) -> list[int]:
    """Concrete dims of one input by the rules of :func:`plan_inputs` (without rule 1)."""
    if shapes and vi.name in shapes:
        return list(shapes[vi.name])
    declared = declared_dims(vi)
    if declared is None:
        raise errors.InputSpecError(
            f"Input '{vi.name}' has no declared shape; give one with --shape {vi.name}=d1,d2,..."
        )
    is_float = vi.type.tensor_type.elem_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                                                  onnx.TensorProto.DOUBLE)
    dims = []
    for i, d in enumerate(declared):
        if isinstance(d, int):
            dims.append(d)
            continue
        kind = _dim_kind(declared, i, is_float)
        pair = _image_pair(declared, i) if kind == "image" else None
        dims.append(pair if pair is not None else _CANDIDATES[kind][0])
    return dims


def make_inputs(
    model: onnx.ModelProto,
    shapes: Mapping[str, Sequence[int]] | None = None,
    seed: int = 0,
    values: Mapping[str, float | int | bool] | None = None,
) -> dict[str, np.ndarray]:
    """Deterministic ``normal`` feeds for every non-initializer graph input."""
    spec = InputSpec(shapes={k: tuple(v) for k, v in (shapes or {}).items()}, values=dict(values or {}))
    return plan_inputs(model, spec).feeds("normal", seed)


def load_npz(data: bytes, model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """User-supplied inputs from a .npz (no pickles); see :func:`load_data`."""
    return load_data(data, "inputs.npz", model)
