"""Zoo page: a sweep's results as a models × pass sets heatmap; click a cell to open it on the Graph page.

Rules:

1. Results come from an upload (``.csv``/``.json`` written by ``python -m fusionviz sweep``), a
   results file the server has under ``artifacts/``, or a small sweep run from this page over
   samples, cached corpus models and the model loaded in the app (an upload or a path included:
   it is written once to ``artifacts/sweep/loaded/<hash>/``), timed against the original when
   asked.
2. A sweep run from the page is the command line's own (``python -m fusionviz sweep ...
   --engine inline``) in a child process, so a model that crashes onnxruntime or eats memory
   costs that child, not the app. The ``inline`` engine checks one cell at a time without Ray:
   Ray's start-up alone takes about ten seconds here, longer than a small sweep. Page sweeps
   are capped at :data:`MAX_PAGE_CELLS` cells and stored in ``artifacts/sweep/zoo.sqlite`` (a
   rerun of the same cells costs nothing); the progress bar counts the cells in the store.
3. The heatmap is coloured by latency ratio (variant / original at onnxruntime level all,
   log scale, green is faster) when the results hold timings, else by the change in node count
   (green: fewer nodes), else by status; the page offers each the results allow. Every cell also
   says its node change and, when timed, its speed ("412→198 · 0.81×"). Invalid, mismatched,
   new-NaN and error cells carry a symbol as well as a colour.
4. Clicking a cell loads that model with that pass set as the current model (through
   :mod:`fusionviz.ui.state`) and switches to the Graph page. A model is opened only from the
   repository, the corpus cache or a folder in ``FUSIONVIZ_ZOO_ROOTS`` (an uploaded results
   file must not make the server read any path it names).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import plotly.graph_objects as go
import streamlit as st

from fusionviz import errors
from fusionviz.ui import cache, common, state

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"
SWEEP_DIR = ARTIFACTS / "sweep"
#: Largest sweep the page runs in-process (rule 2).
MAX_PAGE_CELLS = 60
ROWS = "fv_zoo_rows"  # typed result rows
SOURCE = "fv_zoo_source"  # where they came from, for the caption
CHART_GEN = "fv_zoo_chart_gen"  # bumps after a click is handled, so the selection starts empty

#: Status → (colour, symbol or None, legend label).
STATUS_STYLE = {
    "ok": ("#57b26a", None, "ok"),
    "ok_same": ("#cfe9d4", None, "ok, nothing changed"),
    "invalid": ("#d64545", "x-thin-open", "invalid"),
    "mismatch": ("#f08c2e", "diamond-open", "mismatch"),
    "new_nan": ("#8e44ad", "star-open", "new NaN/Inf"),
    "error": ("#6b6b6b", "circle-x-open", "error"),
}
_STATUS_ORDER = ("ok", "ok_same", "invalid", "mismatch", "new_nan", "error")


# --------------------------------------------------------------------------- the figure


def _kind(row: dict) -> str:
    status = row.get("status") or "error"
    if status == "ok" and row.get("nodes_before") is not None and row.get("nodes_before") == row.get("nodes_after"):
        return "ok_same"
    return status if status in STATUS_STYLE else "error"


def _column(row: dict, several_backends: bool) -> str:
    return f"{row['variant']} @{row['backend']}" if several_backends else str(row["variant"])


def has_timings(rows: Sequence[dict]) -> bool:
    """True when some row has a latency ratio."""
    return any(r.get("latency_ratio") is not None for r in rows)


def has_nodes(rows: Sequence[dict]) -> bool:
    """True when some row has node counts before and after."""
    return any(_node_change(r) is not None for r in rows)


def colour_modes(rows: Sequence[dict]) -> list[str]:
    """Rule 3: what the heatmap can be coloured by, the default first."""
    return [m for m, ok in (("latency", has_timings(rows)), ("nodes", has_nodes(rows)), ("status", True)) if ok]


def _node_change(row: dict | None) -> float | None:
    """Nodes after / before − 1 (−0.4: 40% fewer nodes), or None."""
    if not row:
        return None
    b, a = row.get("nodes_before"), row.get("nodes_after")
    if not isinstance(b, (int, float)) or not isinstance(a, (int, float)) or b <= 0:
        return None
    return a / b - 1.0


def cell_text(row: dict | None) -> str:
    """Rule 3: what a cell says: its node change and, when timed, its speed ("412→198 · 0.81×")."""
    if not row:
        return ""
    parts = []
    if _node_change(row) is not None:
        parts.append(f"{int(row['nodes_before'])}→{int(row['nodes_after'])}")
    if row.get("latency_ratio") is not None:
        parts.append(f"{row['latency_ratio']:.2f}×")
    return " · ".join(parts)


def _hover(row: dict) -> str:
    parts = [f"<b>{row['model']}</b> · {row['variant']} · {row['backend']}", f"status: {row['status']}"]
    if row.get("nodes_before") is not None:
        parts.append(f"nodes: {row['nodes_before']} → {row['nodes_after']}")
    if row.get("latency_ratio") is not None:
        lo, hi = row.get("latency_lo"), row.get("latency_hi")
        band = f" [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else ""
        parts.append(f"latency: {row['latency_ratio']:.3f}× the original @ORT all{band}")
    if row.get("peak_mb") is not None:
        parts.append(f"peak: {row['peak_mb']:.1f} MB")
    why = row.get("error") or ""
    if why:
        parts.append(errors.printable(why, 160))
    parts.append("<i>click to open on the Graph page</i>")
    return "<br>".join(parts)


def heatmap_figure(rows: Sequence[dict], *, color_by: str | None = None) -> go.Figure:
    """Models × variants heatmap (rule 3).

    Args:
        rows: typed result rows (:func:`fusionviz.sweep.read_results`).
        color_by: ``latency``, ``nodes`` or ``status``; default the first of :func:`colour_modes`.

    Returns:
        A figure whose last trace holds one clickable point per cell, with
        ``customdata = [model, variant, backend]``.
    """
    several = len({r["backend"] for r in rows}) > 1
    models = list(dict.fromkeys(r["model"] for r in rows))
    columns = list(dict.fromkeys(_column(r, several) for r in rows))
    cell = {(r["model"], _column(r, several)): r for r in rows}
    color_by = color_by or colour_modes(rows)[0]
    texts = [[cell_text(cell.get((m, c))) for c in columns] for m in models]
    label = {"text": texts, "texttemplate": "%{text}", "textfont": {"size": 9}}
    fig = go.Figure()
    if color_by == "nodes":
        z = [[_node_change(cell.get((m, c))) for c in columns] for m in models]
        span = max(0.05, min(1.0, max((abs(v) for line in z for v in line if v is not None), default=0.05)))
        ticks = [t for t in (-0.75, -0.5, -0.25, -0.1, 0.0, 0.1, 0.25, 0.5) if abs(t) <= span]
        fig.add_trace(go.Heatmap(
            z=z, x=columns, y=models, zmid=0, zmin=-span, zmax=span, colorscale="RdYlGn", reversescale=True,
            hoverinfo="skip", xgap=1, ygap=1, **label,
            colorbar={"title": {"text": "nodes<br>vs original"}, "tickvals": ticks,
                      "ticktext": [f"{t:+.0%}" for t in ticks]}))
    elif color_by == "latency":
        z = [[_log_ratio(cell.get((m, c))) for c in columns] for m in models]
        finite = [abs(v) for line in z for v in line if v is not None]
        span = max(0.1, min(1.0, max(finite, default=0.1)))
        ticks = [t for t in (0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0) if abs(math.log2(t)) <= span]
        fig.add_trace(go.Heatmap(
            z=z, x=columns, y=models, zmid=0, zmin=-span, zmax=span, colorscale="RdYlGn", reversescale=True,
            hoverinfo="skip", xgap=1, ygap=1, **label,
            colorbar={"title": {"text": "latency<br>vs original"}, "tickvals": [math.log2(t) for t in ticks],
                      "ticktext": [f"{t:g}×" for t in ticks]}))
    else:
        codes = {k: i for i, k in enumerate(_STATUS_ORDER)}
        n = len(_STATUS_ORDER)
        scale = []
        for k in _STATUS_ORDER:
            lo, hi = codes[k] / n, (codes[k] + 1) / n
            scale += [[lo, STATUS_STYLE[k][0]], [hi, STATUS_STYLE[k][0]]]
        z = [[codes[_kind(cell[(m, c)])] if (m, c) in cell else None for c in columns] for m in models]
        fig.add_trace(go.Heatmap(z=z, x=columns, y=models, zmin=-0.5, zmax=n - 0.5, colorscale=scale,
                                 showscale=False, hoverinfo="skip", xgap=1, ygap=1, **label))
        for k in _STATUS_ORDER:  # a legend of the colours
            colour, _, label = STATUS_STYLE[k]
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=label, showlegend=True,
                                     marker={"symbol": "square", "size": 12, "color": colour}))
    if color_by == "latency":
        flat = [r for r in rows if r.get("latency_lo") is not None and r.get("latency_hi") is not None
                and r["latency_lo"] <= 1.0 <= r["latency_hi"]]
        if flat:
            fig.add_trace(go.Scatter(
                x=[_column(r, several) for r in flat], y=[r["model"] for r in flat], mode="markers",
                name="interval holds 1× (no clear change)", hoverinfo="skip",
                marker={"symbol": "circle-open", "size": 7, "color": "#555555"}))
    for k in ("invalid", "mismatch", "new_nan", "error"):
        pts = [r for r in rows if _kind(r) == k]
        if not pts:
            continue
        _, symbol, label = STATUS_STYLE[k]
        fig.add_trace(go.Scatter(
            x=[_column(r, several) for r in pts], y=[r["model"] for r in pts], mode="markers",
            name=label, showlegend=color_by != "status", hoverinfo="skip",
            marker={"symbol": symbol, "size": 11, "color": "#111111", "line": {"width": 2, "color": "#111111"}}))
    fig.add_trace(go.Scatter(  # the click targets, one per cell, drawn almost invisibly
        x=[_column(r, several) for r in rows], y=[r["model"] for r in rows], mode="markers", name="cells",
        showlegend=False, customdata=[[r["model"], r["variant"], r["backend"]] for r in rows],
        hovertext=[_hover(r) for r in rows], hoverinfo="text",
        marker={"symbol": "square", "size": 18, "color": "#000000", "opacity": 0}))
    fig.update_layout(
        height=max(320, 120 + 24 * len(models)), margin={"l": 10, "r": 10, "t": 40, "b": 10},
        xaxis={"side": "top", "tickangle": -45, "type": "category", "range": [-0.5, len(columns) - 0.5]},
        yaxis={"type": "category", "range": [len(models) - 0.5, -0.5]},
        legend={"orientation": "h", "y": -0.02, "yanchor": "top"}, clickmode="event+select",
        plot_bgcolor="#f3f3f3", title=None)
    return fig


def _log_ratio(row: dict | None) -> float | None:
    if not row or row.get("latency_ratio") is None or row["latency_ratio"] <= 0:
        return None
    return math.log2(row["latency_ratio"])


# --------------------------------------------------------------------------- opening a cell


def _allowed_roots() -> list[Path]:
    from fusionviz.corpus import cache_dir

    roots = [ROOT, Path(cache_dir())]
    extra = os.environ.get("FUSIONVIZ_ZOO_ROOTS", "")
    roots += [Path(p) for p in extra.split(os.pathsep) if p.strip()]
    return [r.resolve() for r in roots]


def model_source(row: dict) -> tuple[str, str]:
    """How to open a row's model: ``("sample", name)`` or ``("path", path)`` (rule 4).

    Raises:
        fusionviz.errors.ModelLoadError: the file is not on this server or is outside the
            folders the app opens.
    """
    from fusionviz import samples

    name = str(row.get("model") or "")
    raw = str(row.get("model_path") or "")
    if raw:
        p = Path(raw).resolve()
        for s in samples.list_samples():
            if (samples.SAMPLE_DIR / s.file).resolve() == p:
                return "sample", s.name
        if p.is_file():
            if not any(p.is_relative_to(r) for r in _allowed_roots()):
                raise errors.ModelLoadError(
                    f"The model of '{errors.printable(name, 80)}' is outside the folders this app opens "
                    "(the repository and the corpus cache; add more with FUSIONVIZ_ZOO_ROOTS).")
            return "path", str(p)
    try:
        from fusionviz.corpus import load_manifest, path_of

        entry = next((e for e in load_manifest() if e.name == name), None)
        found = path_of(entry) if entry is not None else None
    except errors.FusionvizError:
        found = None
    if found is not None:
        return "path", str(found)
    if name in samples.sample_names():
        return "sample", name
    raise errors.ModelLoadError(f"The model file of '{errors.printable(name, 80)}' is not on this server.")


def _passes_of(row: dict) -> list[str]:
    from fusionviz.passes import registry

    text = str(row.get("passes") or "")
    if text:
        return [p for p in text.split("+") if p]
    variant = str(row.get("variant") or "")
    if variant == "all":
        return registry.default_passes()
    if variant == "original":
        return []
    return [p for p in variant.split("+") if p]


def open_cell(row: dict) -> None:
    """Make the row's model and pass set current and go to the Graph page (rule 4)."""
    kind, what = model_source(row)
    if kind == "sample":
        loaded = cache.load_sample(what)
        origin = {"kind": "sample", "name": what}
    else:
        loaded = cache.load_path(what)
        origin = {"kind": "path", "name": loaded.name}
    passes = _passes_of(row)
    state.set_model(loaded, origin, passes=passes)
    st.session_state[state.MESSAGE] = (
        f"Opened from the Zoo: {row['model']} with pass set '{row['variant']}' ({row['status']}"
        + (f"; {row['error'][:200]}" if row.get("error") else "") + ").")
    st.session_state[CHART_GEN] = st.session_state.get(CHART_GEN, 0) + 1
    st.switch_page("fusionviz/ui/graph_page.py")


# --------------------------------------------------------------------------- sources


def results_files() -> list[Path]:
    """``.csv``/``.json`` files under ``artifacts/`` (newest first, at most 200)."""
    if not ARTIFACTS.is_dir():
        return []
    found = [p for ext in ("*.csv", "*.json") for p in ARTIFACTS.rglob(ext) if p.is_file()]
    found.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    return found[:200]


def _set_rows(rows: list[dict], source: str) -> None:
    st.session_state[ROWS] = rows
    st.session_state[SOURCE] = source
    st.session_state[CHART_GEN] = st.session_state.get(CHART_GEN, 0) + 1


def _load_section() -> None:
    from fusionviz.sweep import read_results

    up = st.file_uploader("Results file (.csv or .json from `python -m fusionviz sweep`)", type=["csv", "json"],
                          key="zoo_upload")
    if up is not None and st.session_state.get("zoo_upload_seen") != (up.name, up.size):
        st.session_state["zoo_upload_seen"] = (up.name, up.size)
        _set_rows(read_results(up.getvalue(), up.name), f"upload {up.name}")
    files = results_files()
    if files:
        labels = [str(p.relative_to(ROOT)) for p in files]
        c1, c2 = st.columns([4, 1])
        pick = c1.selectbox("Or a results file on the server (under artifacts/)", labels, key="zoo_server_file")
        c2.write("")
        if c2.button("Load", key="zoo_load_server") and pick:
            _set_rows(read_results(ROOT / pick), pick)


def _corpus_choices() -> dict[str, str]:
    """Model label → path or sample name, for the page's own sweeps."""
    from fusionviz import samples

    out = {**_loaded_choice(), **{f"sample: {n}": n for n in samples.sample_names()}}
    try:
        from fusionviz.corpus import load_manifest, path_of

        for e in load_manifest():
            p = path_of(e)
            if p is not None:
                out[f"corpus: {e.name}"] = str(p)
    except errors.FusionvizError as exc:
        logger.info("corpus not listed: %s", exc)
    return out


def _loaded_choice() -> dict[str, str]:
    """Rule 1: the model loaded in the app, as a sweep target (a sample by name; anything else
    written once under ``artifacts/sweep/loaded/<hash>/``, inside the folders a cell opens from)."""
    loaded = state.model()
    if loaded is None:
        return {}
    org = state.origin()
    label = f"loaded: {loaded.name}"
    if org.get("kind") == "sample":
        return {label: org["name"]}
    import re

    import onnx

    stem = re.sub(r"[^\w.\-]+", "_", Path(loaded.name).stem)[:80] or "model"
    path = SWEEP_DIR / "loaded" / loaded.sha256[:16] / f"{stem}.onnx"
    if not path.is_file():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            onnx.save(loaded.proto, str(tmp))
            tmp.replace(path)
        except (OSError, ValueError) as exc:
            logger.info("the loaded model could not be written for a sweep: %s", exc)
            return {}
    return {label: str(path)}


def _run_section() -> None:
    from fusionviz.passes import registry
    from fusionviz.sweep import SweepStore, build_cells, parse_passes, read_results, resolve_models

    choices = _corpus_choices()
    loaded = [k for k in choices if k.startswith("loaded: ")]
    if "zoo_run_models" not in st.session_state:
        st.session_state["zoo_run_models"] = loaded  # the model in the app, to start with
    picked = st.multiselect("Models (the model loaded in the app, samples, and corpus models already in the "
                            "cache)", list(choices), key="zoo_run_models")
    passes = st.multiselect("Pass sets (each pass alone; 'all' = every default pass)",
                            ["all", *registry.pass_names()], key="zoo_run_passes")
    timed = st.checkbox("Time each cell against the original (onnxruntime level all; slower)",
                        key="zoo_run_time")
    n = len(picked) * len(passes)
    st.caption(f"{n} cell{'s' if n != 1 else ''}; the page runs up to {MAX_PAGE_CELLS}, one at a time in a "
               "child process (no Ray). For the whole corpus use "
               "`python -m fusionviz sweep wild --passes each --out R.csv`.")
    if not st.button("Run the sweep", key="zoo_run", disabled=n == 0 or n > MAX_PAGE_CELLS, type="primary"):
        return
    targets = [choices[p] for p in picked]
    keys = [c.key for c in build_cells(resolve_models(targets), parse_passes(",".join(passes)), ("ort",))]
    SWEEP_DIR.mkdir(parents=True, exist_ok=True)
    db = SWEEP_DIR / "zoo.sqlite"
    out = SWEEP_DIR / f"zoo_{time.strftime('%Y%m%d_%H%M%S')}.csv"
    cmd = [sys.executable, "-m", "fusionviz", "sweep", *targets, "--passes", ",".join(passes),
           "--engine", "inline", "--out", str(out), "--db", str(db), "--no-progress", *(["--time"] if timed else [])]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    bar = st.progress(0.0, text="starting")
    proc = subprocess.Popen(cmd, cwd=str(ROOT), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        while proc.poll() is None:
            time.sleep(0.5)
            with SweepStore(db) as store:
                done = len(store.done_keys(keys))
            bar.progress(min(1.0, done / max(1, len(keys))), text=f"{done}/{len(keys)} cells checked")
        err = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
    finally:
        if proc.poll() is None:  # the page was left or stopped: end our own child
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    bar.empty()
    if proc.returncode != 0 or not out.is_file():
        lines = [ln for ln in err.splitlines() if ln.strip()]
        raise errors.FusionvizError(f"The sweep failed: {lines[-1] if lines else f'exit status {proc.returncode}'}")
    _set_rows(read_results(out), str(out.relative_to(ROOT)))


def _handle_selection(event, rows: Sequence[dict]) -> None:
    points = []
    try:
        points = list(event.selection.points) if event and event.selection else []
    except AttributeError:
        points = list((event or {}).get("selection", {}).get("points", []))
    for pt in points:
        data = pt.get("customdata")
        if data and len(data) >= 3:
            row = next((r for r in rows if (r["model"], r["variant"], r["backend"]) == tuple(data[:3])), None)
            if row is not None:
                open_cell(row)
                return


def _summary(rows: Sequence[dict]) -> None:
    from fusionviz.sweep import totals

    t = totals(rows)
    cols = st.columns(6)
    cols[0].metric("cells", len(rows))
    for col, k in zip(cols[1:], ("ok", "invalid", "mismatch", "new_nan", "error"), strict=True):
        col.metric(k.replace("_", " "), t.get(k, 0))


def body() -> None:
    """The page."""
    st.title("Zoo: every model × pass set")
    st.caption("Each cell is one model optimized with one pass set, written, re-checked and verified on "
               "normal / zeros / edge inputs (and timed against the original at onnxruntime level all "
               "when the sweep ran with --time). Click a cell to open it on the Graph page.")
    load_tab, run_tab = st.tabs(["Load results", "Run a small sweep"])
    with load_tab:
        _load_section()
    with run_tab:
        _run_section()
    rows = st.session_state.get(ROWS)
    if not rows:
        st.info("Load a results file or run a small sweep to see the heatmap.")
        return
    st.caption(f"Results: {st.session_state.get(SOURCE, '')}")
    _summary(rows)
    modes = colour_modes(rows)
    color_by = modes[0]
    if len(modes) > 1:
        names = {"latency": "speed vs original", "nodes": "node change", "status": "status"}
        if st.session_state.get("zoo_color_by") not in modes:
            st.session_state["zoo_color_by"] = modes[0]
        color_by = st.radio("Colour by", modes, format_func=names.get, horizontal=True, key="zoo_color_by")
    fig = heatmap_figure(rows, color_by=color_by)
    key = f"zoo_heatmap_{st.session_state.get(CHART_GEN, 0)}"
    event = st.plotly_chart(fig, on_select="rerun", selection_mode="points", key=key, width="stretch")
    _handle_selection(event, rows)
    bad = [r for r in rows if r["status"] != "ok"]
    with st.expander(f"Cells that are not ok ({len(bad)})", expanded=bool(bad) and len(bad) <= 20):
        if bad:
            st.dataframe([{k: r[k] for k in ("model", "variant", "backend", "status", "error")} for r in bad],
                         width="stretch", hide_index=True)
        else:
            st.write("Every cell is ok.")
    with st.expander("Open a cell without the chart"):
        labels = [f"{r['model']} · {r['variant']} · {r['backend']} ({r['status']})" for r in rows]
        pick = st.selectbox("Cell", range(len(rows)), format_func=lambda i: labels[i], key="zoo_pick_cell")
        if st.button("Open on the Graph page", key="zoo_open_cell"):
            open_cell(rows[pick])


def render() -> None:
    """Draw the page under the error guard."""
    common.page("Zoo", body)


if __name__ == "__main__":
    render()
