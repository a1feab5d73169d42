"""Session state: one guarded init, the current model, selected passes, inputs, query params.

Rules:

1. Every key the app keeps across pages is created here, once per session, with a default
   (``init``). Widgets never own long-lived state: a widget's key is re-seeded from the
   persistent key before the widget is drawn (``seed``) and its ``on_change`` callback writes
   back, because Streamlit deletes a widget's key on any run where the widget is not drawn
   (e.g. after a page switch).
2. The model to open on comes from, in order: the URL (``?sample=NAME`` or ``?model=REF``, REF
   naming a model this server already holds: an upload or the command line's model), the
   command line (``streamlit run app.py -- --sample NAME | --model PATH``), the default sample
   (``resnet_ts``, else the first sample, else onnx's shipped light ResNet-50). A link to a model
   the server no longer has opens the default sample and says so.
3. After every finished run the URL says the whole state, so a view can be shared by copying
   the address (``sync_query_params``): the model (``sample`` or ``model``), the passes, the
   benchmark's onnxruntime level (``level``), the Graph page's pair (``compare``), focus node
   (``focus``), open body (``body``), near miss (``nearmiss``), view (``view``), overlay
   (``overlay``) and every other option of its toolbar (``g.<option>``: ``g.collapse=off``,
   ``g.hops=3``, ``g.expanded=block A.3`` once per open block; defaults are left out). The
   address is written whole, in one message, at the end of *every* finished run, whether or not
   it looks changed: a run starts from the address the browser sent with its rerun request,
   which on a busy machine is older than the last address the server wrote (a toggle made while
   the previous run's address was still on its way), so "write only what differs" left the
   older address, one toggle behind, as the last one the browser received. A new session (a
   shared link) reads all of it back (``init``; the Graph page checks focus, body and near miss
   against the model). Within a session the state is the truth: a value this session wrote
   before and has moved on from is an echo of an older address, never news (``is_echo``);
   ``common.switch`` asks for news on purpose.
4. What the user says about the inputs (symbolic dims, scalar values, an uploaded .npz/.npy)
   is one :class:`fusionviz.inputs.InputSpec` (``input_spec``); the plan made from it
   (``input_plan``: fusionviz's choices for the rest, probed on the original model) drives the
   pipeline's input shapes, verification, the benchmark and tune alike.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections.abc import Sequence
from typing import Any

import streamlit as st

from fusionviz import errors, samples
from fusionviz.inputs import InputPlan, InputSpec, declared_dims, graph_inputs
from fusionviz.model_io import LoadedModel
from fusionviz.ortlevels import LEVELS
from fusionviz.ui import cache

logger = logging.getLogger(__name__)

DEFAULT_SAMPLE = "resnet_ts"

# Persistent keys (never widget keys).
MODEL = "fv_model"  # LoadedModel | None
ORIGIN = "fv_origin"  # {"kind": "sample"|"upload"|"path"|"light", "name": str}
PASSES = "fv_passes"  # list[str], canonical order
DIMS = "fv_dims"  # {dim key: int}: values the user set for free input dims
VALUES = "fv_values"  # {input name: number}: values the user set for scalar inputs
DATA = "fv_data"  # {"sha": model sha256, "label": file name, "arrays": {input: ndarray}} | None
DATA_ERROR = "fv_data_error"  # one line about a rejected inputs file, or None
FOCUS = "fv_focus"  # node name to focus the graph on, or None
BODY = "fv_body"  # path of the If/Loop/Scan body the Graph page shows, or None (the main graph)
NEAR_MISS = "fv_near_miss"  # "PASS:INDEX": the near miss the Graph page draws, or None
SELECTED = "fv_selected"  # node whose details are shown, or None
COMPARE = "fv_compare"  # "current" | "step:K" | "ort:LEVEL"
GRAPH_OPTS = "fv_graph_opts"  # {"hops", "collapse", "changed_only", "stacked"}
BENCH = "fv_bench"  # last benchmark results (list) and their context
BENCH_JOB = "fv_bench_job"  # a running benchmark job
TOUR = "fv_tour"  # index of the guided-tour step, or None when the tour is off
LOAD_ERROR = "fv_load_error"  # a startup load error to show once
MESSAGE = "fv_message"  # one-line info to show once on the next page (e.g. after a preset)
WIDGETS = "fv_widgets"  # {widget key: value} for widgets whose value must survive page switches
GRAPH_VIEW = "fv_graph_view"  # "passes" | "openvino" | "tvm": what the Graph page draws
URL_SENT = "fv_url_sent"  # {query parameter: values this session has written} (rule 3)

# Query parameters this module owns (rule 3).
QP_SAMPLE = "sample"
QP_MODEL = "model"
QP_PASSES = "passes"
QP_LEVEL = "level"
QP_COMPARE = "compare"
QP_FOCUS = "focus"
QP_BODY = "body"
QP_NEAR_MISS = "nearmiss"
QP_VIEW = "view"
QP_OVERLAY = "overlay"  # the Graph option "overlay" (ui/overlay_view), under its own name
QP_OPT = "g."  # prefix of the other Graph options: g.collapse, g.hops, g.expanded, ...
OWN_PARAMS = (QP_SAMPLE, QP_MODEL, QP_PASSES, QP_LEVEL, QP_COMPARE, QP_FOCUS, QP_BODY, QP_NEAR_MISS, QP_VIEW,
              QP_OVERLAY)
VIEWS = ("passes", "openvino", "tvm")
_COMPARE_RE = r"^(current|step:[1-9][0-9]{0,4}|ort:(" + "|".join(LEVELS) + "))$"
_SENT_KEEP = 64
LEVEL_WIDGET = "bench_level"

_DEFAULT_GRAPH_OPTS = {"hops": 2, "collapse": True, "changed_only": False, "stacked": False}


def _argv_after_dashes(argv: Sequence[str]) -> list[str]:
    """Arguments given to the app (``streamlit run app.py -- ARGS``): Streamlit passes them as argv[1:]."""
    args = list(argv[1:])
    if "--" in args:
        args = args[args.index("--") + 1 :]
    return args


def parse_cli(argv: Sequence[str] | None = None) -> dict[str, str | None]:
    """Parse ``--sample NAME`` / ``--model PATH`` from the app's command line; unknown args are ignored.

    Args:
        argv: the process argv (default ``sys.argv``).

    Returns:
        ``{"sample": NAME or None, "model": PATH or None}``.
    """
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--sample", default=None)
    parser.add_argument("--model", default=None)
    ns, _ = parser.parse_known_args(_argv_after_dashes(sys.argv if argv is None else argv))
    return {"sample": ns.sample, "model": ns.model}


def default_passes() -> list[str]:
    """Passes switched on when a model is first opened: every simplify and fuse pass.

    Layout and precision passes change a CNN graph a lot (or change its numbers), so the first
    screen shows the classic fusions and lets the user add the rest.
    """
    from fusionviz.passes import all_passes

    return [p.name for p in all_passes() if p.category.value in ("simplify", "fuse")]


def canonical(names: Sequence[str]) -> list[str]:
    """Known pass names from ``names`` in the registry's canonical order (unknown ones dropped;
    a pass's earlier name counts as the pass)."""
    from fusionviz.passes import all_passes, registry

    wanted = {registry.canonical_name(n) for n in names}
    return [p.name for p in all_passes() if p.name in wanted]


def _default_model(cli: dict[str, str | None]) -> tuple[LoadedModel, dict]:
    available = samples.sample_names()
    if cli.get("model"):
        loaded = cache.load_path(cli["model"])
        return loaded, {"kind": "path", "name": loaded.name}
    wanted = cli.get("sample") or DEFAULT_SAMPLE
    if wanted in available:
        return cache.load_sample(wanted), {"kind": "sample", "name": wanted}
    if cli.get("sample"):
        logger.warning("sample %r not found; samples are %s", wanted, available)
    if available:
        return cache.load_sample(available[0]), {"kind": "sample", "name": available[0]}
    light = [p for p in samples.light_models() if "resnet50" in p.name] or samples.light_models()
    if not light:
        raise errors.ModelLoadError("No sample models are installed; upload a model on the Model page.")
    loaded = cache.load_path(str(light[0]))
    return loaded, {"kind": "light", "name": light[0].name}


def _first_model(cli: dict[str, str | None], qp_sample: str | None,
                 qp_model: str | None = None) -> tuple[LoadedModel, dict, str | None]:
    """Rule 2: (model, origin, message for the user or None)."""
    if qp_model:
        held = cache.held_model(qp_model)
        if held is not None:
            return held[0], dict(held[1]), None
        loaded, origin = _default_model({"sample": cli.get("sample")})
        return loaded, origin, (f"The model in this link is no longer on this server (uploads are kept "
                                f"while the server runs, {cache.HELD_MODELS} at most); opened the sample "
                                f"'{origin['name']}' instead. Upload the model again on the Model page.")
    if qp_sample:
        if qp_sample in samples.sample_names():
            return cache.load_sample(qp_sample), {"kind": "sample", "name": qp_sample}, None
        loaded, origin = _default_model(cli)
        return loaded, origin, (f"There is no sample '{qp_sample}' on this server; opened "
                                f"'{origin['name']}' instead.")
    loaded, origin = _default_model(cli)
    return loaded, origin, None


def init(argv: Sequence[str] | None = None) -> None:
    """Create every persistent key once per session (rule 1) and open the first model (rule 2)."""
    ss = st.session_state
    if MODEL in ss:
        return
    ss[MODEL] = None
    ss[ORIGIN] = {"kind": "none", "name": ""}
    ss[PASSES] = []
    _forget_model_state(ss)
    ss[GRAPH_OPTS] = dict(_DEFAULT_GRAPH_OPTS)
    ss[BENCH_JOB] = None
    ss[TOUR] = None
    ss[MESSAGE] = None
    ss[GRAPH_VIEW] = "passes"
    ss[URL_SENT] = {}
    ss.setdefault(WIDGETS, {})
    qp = st.query_params
    try:
        loaded, origin, message = _first_model(parse_cli(argv), qp.get(QP_SAMPLE), qp.get(QP_MODEL))
        set_model(loaded, origin)
        if QP_PASSES in qp and message is None:
            ss[PASSES] = canonical([n for n in qp.get(QP_PASSES, "").split(",") if n])
        if message is None:
            _read_view(qp)
        if message:
            ss[MESSAGE] = message
    except errors.FusionvizError as exc:
        ss[LOAD_ERROR] = scrub(str(exc))
    except Exception:  # noqa: BLE001 - never a traceback on the first screen
        logger.exception("opening the first model failed")
        ss[LOAD_ERROR] = "The first model could not be opened; pick a sample or upload a model."
    level = qp.get(QP_LEVEL)
    if level in LEVELS:
        ss[WIDGETS][LEVEL_WIDGET] = level


def _read_view(qp: Any) -> None:
    """Rule 3: the Graph page's pair, view and options from a link (a new session)."""
    import re

    ss = st.session_state
    compare = qp.get(QP_COMPARE)
    if compare and re.match(_COMPARE_RE, compare):
        ss[COMPARE] = compare
    if qp.get(QP_VIEW) in VIEWS:
        ss[GRAPH_VIEW] = qp.get(QP_VIEW)
    for key, param in ((FOCUS, QP_FOCUS), (BODY, QP_BODY), (NEAR_MISS, QP_NEAR_MISS)):
        ss[key] = qp.get(param) or None  # the Graph page checks them against the model
    opts = dict(ss.get(GRAPH_OPTS) or _DEFAULT_GRAPH_OPTS)
    for key in qp:
        if key.startswith(QP_OPT) and len(key) > len(QP_OPT):
            name = key[len(QP_OPT):]
            opts[name] = decode_opt(name, qp.get_all(key))
    if qp.get(QP_OVERLAY):
        opts[QP_OVERLAY] = qp.get(QP_OVERLAY)  # the Graph page checks it against the overlays
    ss[GRAPH_OPTS] = opts


def encode_opt(value: Any) -> list[str]:
    """Rule 3: a Graph option as query values (a list once per item; booleans on/off)."""
    if isinstance(value, bool):
        return ["on" if value else "off"]
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [str(value)]


def decode_opt(name: str, values: list[str]) -> Any:
    """Rule 3: the inverse of :func:`encode_opt`, typed by the option's default where known."""
    default = _DEFAULT_GRAPH_OPTS.get(name)
    last = values[-1] if values else ""
    if name in ("expanded", "sel"):  # lists: the open blocks, several selected nodes (selection_view)
        return [v for v in values if v]
    if isinstance(default, bool) or last in ("on", "off"):
        return last == "on"
    if isinstance(default, int) or (last.isdigit() and len(last) < 7):
        try:
            return int(last)
        except ValueError:
            return default
    return last


def scrub(text: str) -> str:
    """``text`` with every absolute path cut to its file name (no server paths reach the user),
    and onnxruntime's internal messages in words (``errors.readable_runtime_message``: a raw
    ``bfc_arena.cc`` allocation failure never reaches the page)."""
    import re

    text = errors.readable_runtime_message(str(text))
    return re.sub(r"(?<![\w.:/])(?:/[^\s/'\"`:;,()]+)+/([^\s/'\"`:;,()]+)", r"\1", text)


def _forget_model_state(ss) -> None:
    """What belongs to one model (its dims, values, data, focus, selection, benchmark): empty."""
    ss[DIMS] = {}
    ss[VALUES] = {}
    ss[DATA] = None
    ss[DATA_ERROR] = None
    ss[FOCUS] = None
    ss[BODY] = None
    ss[NEAR_MISS] = None
    ss[SELECTED] = None
    ss[COMPARE] = "current"
    ss[BENCH] = None
    ss[LOAD_ERROR] = None


def set_model(loaded: LoadedModel, origin: dict, passes: Sequence[str] | None = None) -> None:
    """Make ``loaded`` the current model; reset what belonged to the previous one."""
    ss = st.session_state
    ss[MODEL] = loaded
    ss[ORIGIN] = dict(origin)
    ss[PASSES] = canonical(passes) if passes is not None else default_passes()
    _forget_model_state(ss)
    if origin.get("kind") != "sample":
        cache.hold_model(loaded, origin)


def model() -> LoadedModel | None:
    """The current model, or None."""
    return st.session_state.get(MODEL)


def origin() -> dict:
    """Where the current model came from: ``{"kind", "name"}``."""
    return dict(st.session_state.get(ORIGIN) or {})


def source_words(org: dict | None = None) -> str:
    """The model's origin in words, without any path."""
    org = org if org is not None else origin()
    return {"sample": "sample", "upload": "upload", "path": "file given to the server",
            "light": "onnx's bundled model"}.get(org.get("kind", ""), "")


def passes() -> list[str]:
    """The selected pass names, canonical order."""
    return list(st.session_state.get(PASSES, []))


def set_passes(names: Sequence[str]) -> None:
    """Select exactly ``names`` (canonical order); the compare pair falls back to 'current'."""
    st.session_state[PASSES] = canonical(names)
    if str(st.session_state.get(COMPARE, "")).startswith("step:"):
        st.session_state[COMPARE] = "current"


# ------------------------------------------------------------------ inputs (rule 4)


def dim_key(input_name: str, index: int, declared: int | str | None) -> str:
    """The name a free dim is set by: its symbolic name, else ``input[index]``."""
    return declared if isinstance(declared, str) and declared else f"{input_name}[{index}]"


def free_dims(loaded: LoadedModel) -> list[tuple[str, int, str]]:
    """Free (symbolic or unknown) dims of the model's inputs: (input name, dim index, dim key)."""
    out = []
    for vi in graph_inputs(loaded.proto):
        if not vi.type.HasField("tensor_type"):
            continue
        declared = declared_dims(vi)
        for i, d in enumerate(declared or ()):
            if not isinstance(d, int):
                out.append((vi.name, i, dim_key(vi.name, i, d)))
    return out


def user_data(loaded: LoadedModel | None = None) -> dict | None:
    """The uploaded inputs file of the current model: ``{"label", "arrays", "sha"}``, or None."""
    loaded = loaded or model()
    data = st.session_state.get(DATA)
    if loaded is None or not data or data.get("sha") != loaded.sha256:
        return None
    return data


def data_dims(loaded: LoadedModel) -> dict[str, int]:
    """Free dims fixed by the uploaded data's array shapes (dim key -> size)."""
    data = user_data(loaded)
    if not data:
        return {}
    out: dict[str, int] = {}
    arrays = data["arrays"]
    for vi in graph_inputs(loaded.proto):
        arr = arrays.get(vi.name)
        declared = declared_dims(vi)
        if arr is None or declared is None or len(declared) != arr.ndim:
            continue
        for i, d in enumerate(declared):
            if not isinstance(d, int):
                out.setdefault(dim_key(vi.name, i, d), int(arr.shape[i]))
    return out


def input_spec(loaded: LoadedModel | None = None) -> InputSpec:
    """Rule 4: the InputSpec from the Model page's widgets and upload.

    An input gets an explicit shape only when the user set one of its free dims (or the
    uploaded data fixes one); its other free dims keep fusionviz's choice. Inputs that are in
    the data file take the data's shape.
    """
    loaded = loaded or model()
    if loaded is None:
        return InputSpec()
    data = user_data(loaded)
    arrays = dict(data["arrays"]) if data else None
    names = {vi.name for vi in graph_inputs(loaded.proto)}
    values = {k: v for k, v in (st.session_state.get(VALUES) or {}).items() if k in names}
    given = {**(st.session_state.get(DIMS) or {}), **data_dims(loaded)}
    base_spec = InputSpec(values=values, data=arrays, data_label=data["label"] if data else "")
    shapes: dict[str, tuple[int, ...]] = {}
    if given:
        base, _ = cache.input_plan(loaded.sha256, base_spec.key(), False, loaded.proto, base_spec)
        base_dims = {c.name: c.dims for c in base.choices} if base is not None else {}
        for vi in graph_inputs(loaded.proto):
            declared = declared_dims(vi)
            if declared is None or (arrays and vi.name in arrays):
                continue
            keys = [dim_key(vi.name, i, d) for i, d in enumerate(declared) if not isinstance(d, int)]
            if not any(k in given for k in keys):
                continue
            fallback = base_dims.get(vi.name) or ()
            dims = []
            for i, d in enumerate(declared):
                if isinstance(d, int):
                    dims.append(d)
                else:
                    k = dim_key(vi.name, i, d)
                    dims.append(int(given.get(k, fallback[i] if i < len(fallback) else 1)))
            shapes[vi.name] = tuple(dims)
    return dataclasses.replace(base_spec, shapes=shapes)


@dataclasses.dataclass(frozen=True)
class Inputs:
    """The inputs of the current model: what the user said, the plan, and why there is none.

    Attributes:
        spec: what the user said.
        plan: the plan (probed on the original when fusionviz chose something), or None.
        error: one line when the plan could not be made or the model does not run on it.
    """

    spec: InputSpec
    plan: InputPlan | None
    error: str | None

    @property
    def key(self) -> tuple:
        """Hashable identity for cache keys (spec key)."""
        return self.spec.key()


INPUTS_MEMO = "fv_inputs_memo"  # (fingerprint, Inputs): the last input_plan() of this session


def _fingerprint(loaded: LoadedModel) -> tuple:
    data = user_data(loaded)
    return (loaded.sha256, tuple(sorted((st.session_state.get(DIMS) or {}).items())),
            tuple(sorted((st.session_state.get(VALUES) or {}).items())),
            (data["label"], id(data["arrays"])) if data else None)


def input_plan(loaded: LoadedModel | None = None) -> Inputs:
    """Rule 4: the current inputs (cached per model and spec; remembered for the session until
    the model, a dim, a value or the data changes, since every page asks several times a run)."""
    loaded = loaded or model()
    if loaded is None:
        return Inputs(InputSpec(), None, None)
    fp = _fingerprint(loaded)
    memo = st.session_state.get(INPUTS_MEMO)
    if memo is not None and memo[0] == fp:
        return memo[1]
    spec = input_spec(loaded)
    plan, error = cache.input_plan(loaded.sha256, spec.key(), True, loaded.proto, spec)
    inputs = Inputs(spec, plan, error)
    st.session_state[INPUTS_MEMO] = (fp, inputs)
    return inputs


def pipeline_shapes(plan: InputPlan | None) -> dict[str, list[int]]:
    """Dims the pipeline fixes: every input with a free dim gets the plan's concrete dims."""
    if plan is None:
        return {}
    out = {}
    for c in plan.choices:
        if c.declared is None:
            if c.dims:
                out[c.name] = list(c.dims)
        elif any(not isinstance(d, int) for d in c.declared):
            out[c.name] = list(c.dims)
    return out


def shapes() -> dict[str, list[int]]:
    """Concrete shapes of the inputs with free dims (the pipeline's ``shapes``).

    Empty when the model has no free dims (then nothing needs overriding).
    """
    loaded = model()
    if loaded is None:
        return {}
    return pipeline_shapes(input_plan(loaded).plan)


def shapes_key() -> tuple:
    """Hashable form of :func:`shapes` for cache keys."""
    return tuple(sorted((k, tuple(v)) for k, v in shapes().items()))


def symbolic_dims(loaded: LoadedModel) -> list[tuple[str, str, int]]:
    """Free dims of the model's inputs, once per dim key: (input name, dim key, value in use)."""
    plan = input_plan(loaded).plan
    used = {c.name: c.dims for c in plan.choices} if plan is not None else {}
    out: list[tuple[str, str, int]] = []
    seen: set[str] = set()
    for name, i, key in free_dims(loaded):
        if key in seen:
            continue
        seen.add(key)
        dims = used.get(name) or ()
        out.append((name, key, int(dims[i]) if i < len(dims) else 1))
    return out


# ------------------------------------------------------------------ widgets and the URL


def seed(widget_key: str, value: Any) -> None:
    """Rule 1: set a widget's value from persistent state before the widget is drawn."""
    st.session_state[widget_key] = value


def model_ref(loaded: LoadedModel) -> str:
    """The ``?model=`` value naming a model this server holds."""
    return loaded.sha256[: cache.REF_LEN]


def wanted_params() -> dict[str, str | None]:
    """Rule 3: the value each owned single-valued query parameter should have (None: absent)."""
    org = origin()
    loaded = model()
    ss = st.session_state
    want: dict[str, str | None] = dict.fromkeys(OWN_PARAMS)
    if loaded is None:
        return want
    if org.get("kind") == "sample":
        want[QP_SAMPLE] = org["name"]
    else:
        want[QP_MODEL] = model_ref(loaded)
    want[QP_PASSES] = ",".join(passes())
    level = (ss.get(WIDGETS) or {}).get(LEVEL_WIDGET)
    if level in LEVELS:
        want[QP_LEVEL] = level
    compare = ss.get(COMPARE) or "current"
    want[QP_COMPARE] = None if compare == "current" else str(compare)
    want[QP_FOCUS] = ss.get(FOCUS) or None
    want[QP_BODY] = ss.get(BODY) or None
    want[QP_NEAR_MISS] = ss.get(NEAR_MISS) or None
    view = ss.get(GRAPH_VIEW) or "passes"
    want[QP_VIEW] = None if view == "passes" else view
    overlay = (ss.get(GRAPH_OPTS) or {}).get(QP_OVERLAY)
    want[QP_OVERLAY] = None if not overlay or overlay == "change" else str(overlay)
    return want


def url_params() -> dict[str, list[str]]:
    """Rule 3: every query parameter the state gives (owned ones and the Graph options)."""
    out = {k: [v] for k, v in wanted_params().items() if v is not None}
    if model() is None:
        return out
    opts = st.session_state.get(GRAPH_OPTS) or {}
    for name, value in sorted(opts.items()):
        if name == QP_OVERLAY:
            continue  # its own parameter
        default = _DEFAULT_GRAPH_OPTS.get(name)
        if value == default or (default is None and not value):
            continue  # a default (and an unset option: False, [], "", None) is left out
        values = encode_opt(value)
        if values:
            out[QP_OPT + name] = values
    return out


def sync_query_params() -> None:
    """Rule 3: write the whole state into the URL, in one message, whatever the URL looks like."""
    try:
        qp = st.query_params
        keep = {k: qp.get_all(k) for k in qp if k not in OWN_PARAMS and not k.startswith(QP_OPT)}
        full = {**keep, **url_params()}
        qp.from_dict(full)
        sent = st.session_state.setdefault(URL_SENT, {})
        for key, values in full.items():
            seen = [v for v in sent.get(key, []) if v not in values]
            sent[key] = (seen + list(values))[-_SENT_KEEP:]
    except Exception:  # noqa: BLE001 - the URL is a convenience, never a failure
        logger.debug("query params not updated", exc_info=True)


def is_echo(param: str, value: str) -> bool:
    """Rule 3: whether ``param=value`` is an older address of ours: this session wrote it before
    and the state has moved on since."""
    if value not in (st.session_state.get(URL_SENT) or {}).get(param, ()):
        return False
    return wanted_params().get(param) != value


def forget_sent(param: str, value: str | None) -> None:
    """Rule 3: ``param=value`` is news again (the app itself asks for it: ``common.switch``)."""
    sent = st.session_state.get(URL_SENT) or {}
    if value is not None and value in sent.get(param, ()):
        sent[param] = [v for v in sent[param] if v != value]


def _store(key: str) -> None:
    st.session_state.setdefault(WIDGETS, {})[key] = st.session_state[key]


def keep(key: str, default: Any) -> dict:
    """Keyword args that make a widget remember its value across pages (rule 1).

    Usage: ``st.checkbox("label", **state.keep("bench_profile", False))``.
    """
    store = st.session_state.setdefault(WIDGETS, {})
    st.session_state[key] = store.get(key, default)
    return {"key": key, "on_change": _store, "args": (key,)}
