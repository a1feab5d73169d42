"""Session state: one guarded init, the current model, selected passes, shapes, query params.

Rules:

1. Every key the app keeps across pages is created here, once per session, with a default
   (``init``). Widgets never own long-lived state: a widget's key is re-seeded from the
   persistent key before the widget is drawn (``seed``) and its ``on_change`` callback writes
   back, because Streamlit deletes a widget's key on any run where the widget is not drawn
   (e.g. after a page switch).
2. The model to open on comes from, in order: the URL (``?sample=NAME&passes=a,b``), the command
   line (``streamlit run app.py -- --sample NAME | --model PATH``), the default sample
   (``resnet_ts``, else the first sample, else onnx's shipped light ResNet-50).
3. After every run the URL mirrors the sample and the passes (``sync_query_params``), so a
   view can be shared by copying the address.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any

import streamlit as st

from fusionviz import errors, model_io, samples
from fusionviz.model_io import LoadedModel

logger = logging.getLogger(__name__)

DEFAULT_SAMPLE = "resnet_ts"

# Persistent keys (never widget keys).
MODEL = "fv_model"  # LoadedModel | None
ORIGIN = "fv_origin"  # {"kind": "sample"|"upload"|"path"|"light", "name": str}
PASSES = "fv_passes"  # list[str], canonical order
DIMS = "fv_dims"  # {dim_param: int}: values for symbolic input dims
FOCUS = "fv_focus"  # node name to focus the graph on, or None
SELECTED = "fv_selected"  # node whose details are shown, or None
COMPARE = "fv_compare"  # "current" | "step:K" | "ort:LEVEL"
GRAPH_OPTS = "fv_graph_opts"  # {"hops", "collapse", "changed_only", "stacked"}
BENCH = "fv_bench"  # last benchmark results (list) and their context
BENCH_JOB = "fv_bench_job"  # a running benchmark job
TOUR = "fv_tour"  # index of the guided-tour step, or None when the tour is off
LOAD_ERROR = "fv_load_error"  # a startup load error to show once
MESSAGE = "fv_message"  # one-line info to show once on the next page (e.g. after a preset)

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
    """Known pass names from ``names`` in the registry's canonical order (unknown ones dropped)."""
    from fusionviz.passes import all_passes

    wanted = set(names)
    return [p.name for p in all_passes() if p.name in wanted]


def _first_model(cli: dict[str, str | None], qp_sample: str | None) -> tuple[LoadedModel, dict]:
    from fusionviz.ui import cache

    available = samples.sample_names()
    if qp_sample and qp_sample in available:
        return cache.load_sample(qp_sample), {"kind": "sample", "name": qp_sample}
    if cli.get("model"):
        loaded = model_io.load_path(cli["model"])
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


def init(argv: Sequence[str] | None = None) -> None:
    """Create every persistent key once per session (rule 1) and open the first model (rule 2)."""
    ss = st.session_state
    if MODEL in ss:
        return
    ss[MODEL] = None
    ss[ORIGIN] = {"kind": "none", "name": ""}
    ss[PASSES] = []
    ss[DIMS] = {}
    ss[FOCUS] = None
    ss[SELECTED] = None
    ss[COMPARE] = "current"
    ss[GRAPH_OPTS] = dict(_DEFAULT_GRAPH_OPTS)
    ss[BENCH] = None
    ss[BENCH_JOB] = None
    ss[TOUR] = None
    ss[LOAD_ERROR] = None
    ss[MESSAGE] = None
    qp = st.query_params
    try:
        loaded, origin = _first_model(parse_cli(argv), qp.get("sample"))
        set_model(loaded, origin)
        if "passes" in qp:
            ss[PASSES] = canonical([n for n in qp.get("passes", "").split(",") if n])
    except errors.FusionvizError as exc:
        ss[LOAD_ERROR] = str(exc)
    except Exception:  # noqa: BLE001 - never a traceback on the first screen
        logger.exception("opening the first model failed")
        ss[LOAD_ERROR] = "The first model could not be opened; pick a sample or upload a model."


def set_model(loaded: LoadedModel, origin: dict, passes: Sequence[str] | None = None) -> None:
    """Make ``loaded`` the current model; reset what belonged to the previous one."""
    ss = st.session_state
    ss[MODEL] = loaded
    ss[ORIGIN] = dict(origin)
    ss[PASSES] = canonical(passes) if passes is not None else default_passes()
    ss[DIMS] = {}
    ss[FOCUS] = None
    ss[SELECTED] = None
    ss[COMPARE] = "current"
    ss[BENCH] = None
    ss[LOAD_ERROR] = None


def model() -> LoadedModel | None:
    """The current model, or None."""
    return st.session_state.get(MODEL)


def passes() -> list[str]:
    """The selected pass names, canonical order."""
    return list(st.session_state.get(PASSES, []))


def set_passes(names: Sequence[str]) -> None:
    """Select exactly ``names`` (canonical order); the compare pair falls back to 'current'."""
    st.session_state[PASSES] = canonical(names)
    if str(st.session_state.get(COMPARE, "")).startswith("step:"):
        st.session_state[COMPARE] = "current"


def symbolic_dims(loaded: LoadedModel) -> list[tuple[str, str, int]]:
    """Symbolic dims of the model's inputs: (input name, dim name, default value)."""
    from fusionviz.inputs import DEFAULT_SEQ_LEN, graph_inputs

    out: list[tuple[str, str, int]] = []
    seen: set[str] = set()
    for vi in graph_inputs(loaded.proto):
        if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            continue
        for i, d in enumerate(vi.type.tensor_type.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                continue
            name = d.dim_param or f"{vi.name}[{i}]"
            if name in seen:
                continue
            seen.add(name)
            low = name.lower()
            default = DEFAULT_SEQ_LEN if any(k in low for k in ("seq", "len", "token")) else 1
            out.append((vi.name, name, default))
    return out


def shapes() -> dict[str, list[int]]:
    """Concrete shapes for inputs with symbolic dims, from the values set on the Model page.

    Empty when the model has no symbolic dims (then nothing needs overriding).
    """
    from fusionviz.inputs import graph_inputs

    loaded = model()
    if loaded is None:
        return {}
    dims = st.session_state.get(DIMS, {})
    out: dict[str, list[int]] = {}
    for vi in graph_inputs(loaded.proto):
        if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            continue
        resolved: list[int] = []
        symbolic = False
        for i, d in enumerate(vi.type.tensor_type.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                resolved.append(int(d.dim_value))
                continue
            symbolic = True
            name = d.dim_param or f"{vi.name}[{i}]"
            low = name.lower()
            default = 32 if any(k in low for k in ("seq", "len", "token")) else 1
            resolved.append(int(dims.get(name, default)))
        if symbolic:
            out[vi.name] = resolved
    return out


def shapes_key() -> tuple:
    """Hashable form of :func:`shapes` for cache keys."""
    return tuple(sorted((k, tuple(v)) for k, v in shapes().items()))


def seed(widget_key: str, value: Any) -> None:
    """Rule 1: set a widget's value from persistent state before the widget is drawn."""
    st.session_state[widget_key] = value


def sync_query_params() -> None:
    """Rule 3: mirror the sample and passes in the URL (only for samples: uploads have no name)."""
    try:
        origin = st.session_state.get(ORIGIN) or {}
        qp = st.query_params
        if origin.get("kind") == "sample":
            want = {"sample": origin["name"], "passes": ",".join(passes())}
            if any(qp.get(k) != v for k, v in want.items()):
                qp.update(want)
        elif "sample" in qp:
            qp.clear()
    except Exception:  # noqa: BLE001 - the URL is a convenience, never a failure
        logger.debug("query params not updated", exc_info=True)


WIDGETS = "fv_widgets"  # {widget key: value} for widgets whose value must survive page switches


def _store(key: str) -> None:
    st.session_state.setdefault(WIDGETS, {})[key] = st.session_state[key]


def keep(key: str, default: Any) -> dict:
    """Keyword args that make a widget remember its value across pages (rule 1).

    Usage: ``st.checkbox("label", **state.keep("bench_profile", False))``.
    """
    store = st.session_state.setdefault(WIDGETS, {})
    st.session_state[key] = store.get(key, default)
    return {"key": key, "on_change": _store, "args": (key,)}
