"""Model page: pick a sample, upload a model or open one by its path on the server, see its
summary, and say what the inputs are.

Opening by path is allowed only under the folders in ``FUSIONVIZ_OPEN_PATHS`` (the checks live in
:mod:`fusionviz.server_paths`; this page lays out and calls). The upload limit is the command
line's model-size limit; the caption under the uploader says how to open a bigger model.

The Inputs section shows fusionviz's input plan (every input's dtype and dims, which dims
fusionviz chose and why, scalar values it inferred) with widgets to change it: a number per
free dim, a value per scalar input, and an upload of the user's own inputs (.npz/.npy) that
becomes an extra verification set. The same inputs drive the passes, verification, the
benchmark and tune.
"""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd
import streamlit as st

from fusionviz import errors, server_paths
from fusionviz.ui import cache, common, state

logger = logging.getLogger(__name__)

UPLOAD_SHA = "fv_upload_sha"
UPLOAD_ERROR = "fv_upload_error"
PATH_ERROR = "fv_path_error"
PATH_INPUT = "open_path"

KIND_WORDS = {
    "image": "image side",
    "seq": "sequence length",
    "audio": "audio samples",
    "other": "free dim",
}


def kind_words(kind: str, value: Any) -> str:
    """Why a free dim has its value, in words; audio says how long the value is at 16 kHz."""
    words = KIND_WORDS.get(kind, "free dim")
    if kind == "audio" and isinstance(value, int) and value > 0:
        ms = value / 16.0
        length = f"{ms / 1000:g} s" if ms >= 1000 else f"{ms:g} ms"
        words += f", {length} at 16 kHz"
    return words


def _load_sample(name: str) -> None:
    try:
        state.set_model(cache.load_sample(name), {"kind": "sample", "name": name})
    except errors.FusionvizError as exc:
        st.session_state[state.LOAD_ERROR] = state.scrub(str(exc))


def _gallery() -> None:
    from fusionviz import samples

    items = samples.list_samples()
    if not items:
        st.caption("No sample models are installed (run `make samples`).")
        return
    org = state.origin()
    cols = st.columns(3)
    for i, s in enumerate(items):
        with cols[i % 3].container(border=True):
            current = org.get("kind") == "sample" and org.get("name") == s.name
            st.markdown(f"**{s.title}**" + ("  :green-badge[:material/check: open]" if current else ""))
            st.caption(s.description)
            st.button("Open" if not current else "Open again", key=f"sample_{s.name}",
                      on_click=_load_sample, args=(s.name,), width="stretch",
                      type="secondary" if current else "primary")


def _take_upload(up: Any) -> None:
    """Make an uploaded file the current model (or remember why it was refused)."""
    if up is None:
        st.session_state[UPLOAD_SHA] = None
        st.session_state[UPLOAD_ERROR] = None
        return
    data = up.getvalue()
    sha = cache.bytes_sha(data)
    if st.session_state.get(UPLOAD_SHA) == sha:
        return  # this upload is already the current model (or already failed)
    st.session_state[UPLOAD_SHA] = sha
    try:
        loaded = cache.load_bytes(sha, up.name, data)
    except errors.FusionvizError as exc:
        st.session_state[UPLOAD_ERROR] = state.scrub(str(exc))
        return
    st.session_state[UPLOAD_ERROR] = None
    state.set_model(loaded, {"kind": "upload", "name": loaded.name})


def _on_upload() -> None:
    """Callback: runs before the page, so the sidebar and every section see the new model.

    A new pick in the uploader is the user's choice even when it is the file uploaded before
    (a sample may have replaced it since)."""
    st.session_state[UPLOAD_SHA] = None
    _take_upload(st.session_state.get("upload"))


def _bigger_words(limit_mb: int) -> str:
    """How to open a model over the upload limit."""
    where = ("open it by its path on the server (below)" if server_paths.allowed_dirs()
             else f"open it by its path on the server (set {server_paths.OPEN_PATHS_ENV}, see below)")
    return (f"Uploads up to {limit_mb:,} MB (the model-size limit, FUSIONVIZ_MAX_MODEL_MB). For a bigger "
            f"model: {where}, or start the app on it: `streamlit run app.py -- --model PATH`.")


def _sync_upload_limit(limit_mb: int) -> None:
    """The server refuses an upload over ``server.maxUploadSize``: make it the model-size limit too."""
    from streamlit import config

    if config.get_option("server.maxUploadSize") != limit_mb:
        config.set_option("server.maxUploadSize", limit_mb)


def _upload() -> None:
    limit_mb = server_paths.upload_limit_mb()
    _sync_upload_limit(limit_mb)
    up = st.file_uploader("Upload an ONNX model (.onnx, or a .zip of a folder with external data)",
                          type=["onnx", "zip"], key="upload", on_change=_on_upload,
                          max_upload_size=limit_mb)
    st.caption(_bigger_words(limit_mb))
    if up is not None:
        _take_upload(up)  # no-op when the callback already took it
    err = st.session_state.get(UPLOAD_ERROR)
    if err:
        st.error(err)


def _open_path() -> None:
    """Callback of the path field: check the path, load the model, make it current."""
    text = str(st.session_state.get(PATH_INPUT) or "")
    try:  # the user typed this path and the allowed folders are on the page: not scrubbed
        p = server_paths.resolve_model_path(text, server_paths.allowed_dirs())
    except errors.FusionvizError as exc:
        st.session_state[PATH_ERROR] = str(exc)
        return
    try:
        with st.spinner("Reading the model..."):
            loaded = cache.load_path(str(p))
    except errors.FusionvizError as exc:
        st.session_state[PATH_ERROR] = state.scrub(str(exc))
        return
    st.session_state[PATH_ERROR] = None
    state.set_model(loaded, {"kind": "path", "name": loaded.name})


def _by_path() -> None:
    allowed = server_paths.allowed_dirs()
    if not allowed:
        st.caption(f"Off on this server. {server_paths.HOW_TO_ENABLE}")
        return
    with st.form("open_path_form", border=False):
        c1, c2 = st.columns([5, 1], vertical_alignment="bottom")
        c1.text_input("Path of an .onnx file, a .zip or a model folder on the server", key=PATH_INPUT,
                      placeholder=str(allowed[0] / "model.onnx"),
                      help="Weights stored as external data next to the .onnx file are read with it.")
        c2.form_submit_button("Open", key="open_path_go", on_click=_open_path, type="primary", width="stretch")
    st.caption("Allowed folders: " + ", ".join(f"`{d}`" for d in allowed)
               + f" ({server_paths.OPEN_PATHS_ENV}).")
    err = st.session_state.get(PATH_ERROR)
    if err:
        st.error(err)


def _summary(loaded: Any) -> None:
    s = cache.summary(loaded.sha256, loaded.proto)
    cost = None
    try:
        cost = cache.model_cost(loaded.sha256, state.shapes_key(), loaded.proto)
    except ImportError:
        pass
    except errors.FusionvizError as exc:
        st.caption(f"FLOPs not available: {state.scrub(str(exc))}")
    c = st.columns(5)
    c[0].metric("Nodes", f"{s.node_count:,}")
    c[1].metric("Parameters", common.fmt_count(s.param_count))
    c[2].metric("Weights", common.fmt_bytes(s.param_bytes))
    flops = getattr(cost, "flops", None) if cost is not None else None
    c[3].metric("FLOPs", common.fmt_count(flops) if flops else "-",
                help="Multiply-adds count as two FLOPs; common ops only.")
    c[4].metric("Opsets", ", ".join(f"{k.replace('ai.onnx', 'onnx')} {v}" for k, v in s.opsets.items()))
    st.caption(f"Producer: {s.producer or '-'} · IR {s.ir_version} · {state.source_words()} · "
               f"sha256 `{loaded.short_hash}`")
    left, right = st.columns([1, 1])
    with left:
        st.markdown("**Outputs**")
        st.dataframe(pd.DataFrame([{"name": o["name"], "dtype": o["dtype"],
                                    "shape": "[" + ", ".join(map(str, o["shape"])) + "]"}
                                   for o in s.outputs]), hide_index=True, width="stretch")
    with right:
        st.markdown("**Op histogram**")
        from fusionviz.charts import op_histogram

        st.plotly_chart(op_histogram(s.op_histogram), config={"displayModeBar": False})


# ------------------------------------------------------------------ inputs


def _fmt_dims(dims: Any) -> str:
    if dims is None:
        return "no shape"
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _how(loaded: Any, plan: Any) -> dict[str, list[str]]:
    """Per input: one phrase per free dim saying who chose its value and why."""
    set_by_user = st.session_state.get(state.DIMS) or {}
    from_data = state.data_dims(loaded)
    out: dict[str, list[str]] = {}
    first_seen: dict[str, str] = {}
    for c in plan.choices:
        chosen = dict(c.chosen)
        notes = []
        for i, d in enumerate(c.declared or ()):
            if isinstance(d, int):
                continue
            key = state.dim_key(c.name, i, d)
            value = c.dims[i] if i < len(c.dims) else "?"
            if key in from_data:
                why = "from your data"
            elif key in set_by_user:
                why = "set by you"
            elif i in chosen:
                why = f"chosen: {kind_words(chosen[i], value)}"
            elif key in first_seen:
                why = f"same as in {first_seen[key]}"
            else:
                why = "chosen: batch"
            notes.append(f"{key} = {value} ({why})")
            first_seen.setdefault(key, c.name)
        out[c.name] = notes
    return out


def _value_text(c: Any) -> str:
    if c.value is not None:
        note = c.value_note.split(";")[0].replace("given with --input", "set by you")
        return f"{c.value} ({note})" if note else str(c.value)
    if c.is_mask:
        return "all ones (a mask)"
    if c.high is not None:
        return f"integers in [0, {c.high})"
    return "random, zeros and large values (one per input set)"


def _plan_table(loaded: Any, plan: Any) -> None:
    how = _how(loaded, plan)
    rows = []
    for c in plan.choices:
        dims = "; ".join(how.get(c.name) or []) or ("a scalar" if c.declared == () else "all fixed")
        rows.append({"input": c.name, "dtype": c.dtype, "declared": _fmt_dims(c.declared),
                     "used": _fmt_dims(c.dims), "free dims": dims, "values": _value_text(c)})
    st.table(pd.DataFrame(rows), hide_index=True)


def _on_dim(name: str) -> None:
    dims = dict(st.session_state.get(state.DIMS) or {})
    dims[name] = int(st.session_state[f"dim_{name}"])
    st.session_state[state.DIMS] = dims


def _on_value(name: str) -> None:
    values = dict(st.session_state.get(state.VALUES) or {})
    values[name] = st.session_state[f"value_{name}"]
    st.session_state[state.VALUES] = values


def _reset_inputs() -> None:
    st.session_state[state.DIMS] = {}
    st.session_state[state.VALUES] = {}


def _dims(loaded: Any) -> None:
    sym = state.symbolic_dims(loaded)
    if not sym:
        return
    from_data = state.data_dims(loaded)
    st.markdown("**Free dims**: set once here; passes, verification and the benchmark all use them.")
    cols = st.columns(4)
    current = st.session_state.get(state.DIMS) or {}
    for i, (inp, name, used) in enumerate(sym):
        state.seed(f"dim_{name}", int(from_data.get(name, current.get(name, used))))
        cols[i % len(cols)].number_input(
            f"{name}  (input {inp})", min_value=1, max_value=1_000_000, step=1, key=f"dim_{name}",
            on_change=_on_dim, args=(name,), disabled=name in from_data,
            help="Fixed by your inputs file." if name in from_data else None)


def _values(plan: Any) -> None:
    scalars = [c for c in plan.choices if c.declared is not None and len(c.declared) == 0]
    if not scalars:
        return
    st.markdown("**Scalar inputs**: one value each (fusionviz infers one where the model compares "
                "the input with a constant).")
    cols = st.columns(4)
    given = st.session_state.get(state.VALUES) or {}
    for i, c in enumerate(scalars):
        key = f"value_{c.name}"
        col = cols[i % len(cols)]
        helptext = c.value_note or "No value inferred: the input sets use random, zero and large values."
        if c.dtype == "bool":
            state.seed(key, bool(given.get(c.name, c.value if c.value is not None else False)))
            col.checkbox(f"{c.name} ({c.dtype})", key=key, on_change=_on_value, args=(c.name,), help=helptext)
        elif c.dtype.startswith(("int", "uint")):
            state.seed(key, int(given.get(c.name, c.value if c.value is not None else 0)))
            col.number_input(f"{c.name} ({c.dtype})", step=1, key=key, on_change=_on_value, args=(c.name,),
                             help=helptext)
        else:
            state.seed(key, float(given.get(c.name, c.value if c.value is not None else 0.0)))
            col.number_input(f"{c.name} ({c.dtype})", key=key, format="%g", on_change=_on_value,
                             args=(c.name,), help=helptext)


def _take_data(up: Any) -> None:
    from fusionviz.inputs import load_data

    loaded = state.model()
    if up is None or loaded is None:
        return
    try:
        arrays = load_data(up.getvalue(), up.name, loaded.proto)
    except errors.FusionvizError as exc:
        st.session_state[state.DATA_ERROR] = state.scrub(str(exc))
        return
    except Exception:  # noqa: BLE001 - a hostile file must cost one line, not the page
        logger.exception("reading an inputs file failed")
        st.session_state[state.DATA_ERROR] = f"Could not read {up.name} as .npz/.npy."
        return
    st.session_state[state.DATA_ERROR] = None
    st.session_state[state.DATA] = {"sha": loaded.sha256, "label": up.name, "arrays": arrays}


def _on_data() -> None:
    up = st.session_state.get("inputs_upload")
    if up is None:
        st.session_state[state.DATA] = None
        st.session_state[state.DATA_ERROR] = None
        return
    _take_data(up)


def _remove_data() -> None:
    st.session_state[state.DATA] = None
    st.session_state[state.DATA_ERROR] = None


def _data(loaded: Any) -> None:
    st.file_uploader("Your own inputs (.npz with one array per input name, or .npy for a one-input "
                     "model): verified as an extra input set", type=["npz", "npy"], key="inputs_upload",
                     on_change=_on_data)
    err = st.session_state.get(state.DATA_ERROR)
    if err:
        st.error(err)
    data = state.user_data(loaded)
    if data:
        c1, c2 = st.columns([5, 1], vertical_alignment="center")
        arrays = ", ".join(f"{k} {v.dtype}[{','.join(map(str, v.shape))}]" for k, v in data["arrays"].items())
        c1.success(f"Using your inputs from **{data['label']}** as the input set 'user': {arrays}.")
        c2.button("Remove", key="inputs_remove", on_click=_remove_data, icon=":material/close:")


def _inputs(loaded: Any) -> None:
    from fusionviz.inputs import SET_NAMES

    st.subheader("Inputs")
    inputs = state.input_plan(loaded)
    if inputs.error:
        st.error(state.scrub(inputs.error))
        if inputs.plan is None and state.free_dims(loaded):
            _dims(loaded)  # the sizes to set are the fix
    plan = inputs.plan
    if plan is not None:
        _plan_table(loaded, plan)
        user = state.user_data(loaded)
        sets = list(SET_NAMES) + (["user"] if user else [])
        probed = (" fusionviz ran the original model once on these inputs: it runs." if plan.probed else "")
        st.caption(f"Verification input sets: {', '.join(sets)} (normal: seeded random; zeros; edge: large "
                   f"magnitudes{'; user: ' + user['label'] if user else ''}).{probed}")
        _dims(loaded)
        _values(plan)
        if st.session_state.get(state.DIMS) or st.session_state.get(state.VALUES):
            st.button("Back to fusionviz's choices", key="inputs_reset", on_click=_reset_inputs,
                      icon=":material/restart_alt:")
    _data(loaded)


def body() -> None:
    """The Model page."""
    st.title("Model")
    st.markdown("Open a sample, upload your own model or open one by its path on the server. Everything "
                "else in the app works on the model chosen here.")
    st.subheader("Samples")
    _gallery()
    st.subheader("Upload")
    _upload()
    st.subheader("Open a model by path on the server")
    _by_path()
    loaded = state.model()
    if loaded is None:
        return
    st.subheader(f"Summary: {loaded.name}")
    for note in getattr(loaded, "notes", ()):
        st.info(note, icon=":material/info:")
    _summary(loaded)
    with common.guard("planning the inputs"):
        _inputs(loaded)
    st.divider()
    c1, c2 = st.columns(2)
    if c1.button("See the graph before / after →", key="model_to_graph", type="primary",
                 width="stretch"):
        common.switch("graph")
    if c2.button("Toggle passes →", key="model_to_passes", width="stretch"):
        common.switch("passes")


def render() -> None:
    """Draw the page under the error guard."""
    common.page("Model", body)


if __name__ == "__main__":
    render()
