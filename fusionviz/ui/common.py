"""Pieces every page uses: the error guard, the sidebar, the current pipeline, drawing a graph,
the exports.

Rules:

1. A page body runs inside :func:`page`: a ``FusionvizError`` becomes ``st.error(one line)``,
   anything else becomes a short error line while the traceback goes to the server log.
   Streamlit's own control flow (rerun, stop, switch_page) is a ``BaseException`` and passes.
   No message shows a server path (:func:`fusionviz.ui.state.scrub`).
2. The graph is drawn by the pan/zoom component when it is there and works; otherwise by
   ``st.graphviz_chart`` (the browser lays the DOT out). Either way the page keeps working.
3. The sidebar is drawn first and drawn again after the page body when the body changed the
   model or the passes, so it always names the model the run ended on.
4. Switching pages keeps the query parameters (the app's and any other page's).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import streamlit as st

from fusionviz import errors
from fusionviz.graphview.dot import STATUS_STYLE, STATUS_TITLE
from fusionviz.ui import cache, state

logger = logging.getLogger(__name__)

PAGES = {
    "model": "fusionviz/ui/model_page.py",
    "graph": "fusionviz/ui/graph_page.py",
    "passes": "fusionviz/ui/passes_page.py",
    "bench": "fusionviz/ui/bench_page.py",
    "zoo": "fusionviz/ui/zoo_page.py",
    "learn": "fusionviz/ui/learn_page.py",
}

# (label, fill, border): the colours graphview draws, read from graphview.dot.STATUS_STYLE.
LEGEND = (
    *((STATUS_TITLE[s], *STATUS_STYLE[s][:2]) for s in ("fused", "removed", "changed")),
    ("unchanged (colour = op family)", "#ffffff", "#7a7a7a"),
)
#: Shown after LEGEND only when a diff lifted Constant nodes to initializers (no change).
LIFTED_LEGEND = (STATUS_TITLE["lifted"], *STATUS_STYLE["lifted"][:2])


def lifted_swatch(counts: dict | None, sw_style: str) -> str:
    """The "lifted to initializer" legend entry with its count, or "" when nothing was lifted."""
    n = int((counts or {}).get("lifted", 0) or 0)
    if not n:
        return ""
    label, fill, border = LIFTED_LEGEND
    return f"<span {sw_style.format(fill=fill, border=border)}></span>{label} <b>{n:,}</b>"


@contextmanager
def guard(what: str) -> Iterator[None]:
    """Rule 1 as a context manager; ``what`` names the step in the generic message."""
    try:
        yield
    except errors.FusionvizError as exc:
        st.error(state.scrub(str(exc)))
    except ImportError as exc:
        logger.exception("missing module while %s", what)
        st.error(f"This part of fusionviz is not available ({exc.name or exc}); the rest of the app works.")
    except Exception:  # noqa: BLE001 - never a traceback in the page
        logger.exception("error while %s", what)
        st.error(f"Something went wrong while {what}; the details are in the server log.")


def page(title: str, body: Callable[[], None]) -> None:
    """Draw the sidebar and the page body under the error guard (rules 1 and 3)."""
    state.init()
    cache.page_run_started()
    try:
        _page(title, body)
    finally:
        cache.page_run_finished()


def _sidebar_key() -> tuple:
    loaded = state.model()
    return (loaded.sha256 if loaded is not None else None, state.origin().get("name"), len(state.passes()))


def _page(title: str, body: Callable[[], None]) -> None:
    with st.sidebar:
        side = st.empty()
    with side.container(), guard("drawing the sidebar"):
        sidebar()
    shown = _sidebar_key()
    finished = False
    try:
        if st.session_state.get(state.LOAD_ERROR):
            st.error(st.session_state[state.LOAD_ERROR])
        msg = st.session_state.get(state.MESSAGE)
        if msg:
            st.info(msg)
            st.session_state[state.MESSAGE] = None
        with guard(f"drawing the {title} page"):
            body()
        finished = True
        with guard("checking the result"):
            _validity_watch()
    finally:
        if _sidebar_key() != shown:  # the body changed the model or the passes (rule 3)
            with side.container(), guard("drawing the sidebar"):
                sidebar()
        if finished:  # not on a page switch or rerun: the next run writes the URL
            state.sync_query_params()


CHECKING_WORDS = ("This result's validity check (ONNX checker, onnxruntime) runs in the background; a pass "
                  "whose result breaks it is declined, and the page shows that from its next run.")


def _validity_watch() -> None:
    """Cache rule 7: while the validity check of the shown result is still to run, start it (the
    page is drawn) and say so under the page. The page does not rerun itself when the check
    ends (a rerun from a polling fragment raced with the next click and lost a toggle): a result
    replaced after its check is what the page's next run shows."""
    loaded = state.model()
    if loaded is None:
        return
    names, shapes = tuple(state.passes()), state.shapes_key()
    if not cache.checking(loaded.sha256, names, shapes):
        return
    cache.start_checks()
    st.caption(CHECKING_WORDS)


def switch(name: str, **params: str | None) -> None:
    """Go to page ``name`` (a key of PAGES), keeping the query parameters (rule 4).

    Args:
        name: the page key.
        **params: query parameters to set on the way (e.g. ``focus=NODE`` for the Graph page);
            None removes one.
    """
    # The state's own parameters come from the state (the URL may be older: state rule 3).
    query = {k: st.query_params.get_all(k) for k in st.query_params
             if k not in state.OWN_PARAMS and not k.startswith(state.QP_OPT)}
    query.update(state.url_params())
    for k, v in params.items():
        if v is None:
            query.pop(k, None)
        else:
            query[k] = [v]
            state.forget_sent(k, v)  # asked for on purpose: the page takes it as news
    st.switch_page(PAGES[name], query_params={k: v[-1] if len(v) == 1 else v for k, v in query.items()})


def url_news(param: str, seen_key: str) -> str | None:
    """The ``?param=`` value when the page has not seen it yet (a link, an edited address, a
    :func:`switch` that sets it), else None; ``seen_key`` remembers the value last read or
    written (:func:`to_url`). A value this session wrote before is an older address of ours that
    the browser sent back, not news (state rule 3)."""
    try:
        wanted = st.query_params.get(param)
    except Exception:  # noqa: BLE001 - the URL is a convenience, never a failure
        return None
    if wanted and wanted != st.session_state.get(seen_key) and not state.is_echo(param, wanted):
        st.session_state[seen_key] = wanted
        return wanted
    return None


def to_url(param: str, value: str | None, seen_key: str) -> None:
    """The URL says what the page shows: ``param`` set to ``value``, or removed when it is None."""
    try:
        have = st.query_params.get(param)
        if value and have != value:
            st.query_params[param] = value
        elif not value and have is not None:
            del st.query_params[param]
    except Exception:  # noqa: BLE001 - the URL is a convenience, never a failure
        logger.debug("%s not written to the URL", param, exc_info=True)
    st.session_state[seen_key] = value


def sidebar() -> None:
    """Current model (file or sample name only) and pass count; the tour is drawn by app.py."""
    loaded = state.model()
    if loaded is not None:
        st.caption("Model")
        org = state.origin()
        st.markdown(f"**{loaded.name}**  \n{state.source_words(org)} · `{loaded.short_hash}` · "
                    f"{fmt_bytes(loaded.size_bytes)}")
        n = len(state.passes())
        st.caption(f"{n} pass{'es' if n != 1 else ''} selected")
    else:
        st.caption("No model loaded: pick one on the Model page.")


def require_model() -> Any:
    """The current model, or an info box and ``st.stop()`` when there is none."""
    loaded = state.model()
    if loaded is None:
        st.info("No model loaded yet: choose a sample or upload an .onnx file on the Model page.")
        if st.button("Go to the Model page", key="goto_model"):
            switch("model")
        st.stop()
    return loaded


def current_pipeline(progress: bool = True) -> Any:
    """The cached pipeline result for the current model, passes and shapes."""
    loaded = state.model()
    names = state.passes()
    if progress:
        with st.spinner(f"Running {len(names)} passes..."):
            return cache.run(loaded, names, state.shapes_key())
    return cache.run(loaded, names, state.shapes_key())


def pipeline_key(loaded: Any, names: Sequence[str]) -> tuple:
    """Cache key of a pipeline: model hash, pass tuple and shapes. The hash carries the model's
    revision once a checked result replaced a shown one (cache rule 7), so that everything
    computed from the replaced result is computed again."""
    return (cache.keyed_sha(loaded.sha256), tuple(names), state.shapes_key())


def legend(counts: dict | None = None) -> None:
    """The diff colour legend, with counts when given."""
    keys = {"fused / new": ("fused", "added"), "removed": ("removed",), "changed": ("changed",),
            "unchanged (colour = op family)": ("unchanged",)}
    parts = []
    for label, fill, border in LEGEND:
        n = ""
        if counts:
            n = f" <b>{sum(int(counts.get(k, 0)) for k in keys[label])}</b>"
        parts.append(
            f"<span style='display:inline-block;width:1.1em;height:0.8em;background:{fill};"
            f"border:2px solid {border};border-radius:3px;margin:0 0.35em 0 1em;"
            f"vertical-align:middle'></span>{label}{n}"
        )
    lifted = lifted_swatch(counts, "style='display:inline-block;width:1.1em;height:0.8em;background:{fill};"
                                   "border:2px dotted {border};border-radius:3px;margin:0 0.35em 0 1em;"
                                   "vertical-align:middle'")
    if lifted:
        parts.append(lifted)
    st.markdown("<div style='font-size:0.9em'>" + "".join(parts) + "</div>", unsafe_allow_html=True)


def render_options(**overrides) -> tuple:
    """Hashable RenderOptions kwargs from the persistent graph options plus ``overrides``."""
    opts = dict(st.session_state.get(state.GRAPH_OPTS) or {})
    d = {
        "collapse": bool(opts.get("collapse", True)),
        "focus": st.session_state.get(state.FOCUS),
        "hops": int(opts.get("hops", 2)),
        "changed_only": bool(opts.get("changed_only", False)),
        "max_nodes": 400,
        "legend": False,
        "expanded": tuple(opts.get("expanded", ())),
    }
    d.update(overrides)
    return tuple(sorted(d.items()))


def show_graph(rendered: Any, *, key: str, height: int = 620) -> tuple[str, str] | None:
    """Rule 2: draw ``rendered`` (a graphview Rendered).

    Returns:
        ("node", node name) or ("scope", scope path) for the last click in the pan/zoom viewer,
        else None (also always None with the ``st.graphviz_chart`` fallback, which has no clicks).
    """
    if getattr(rendered, "note", ""):
        st.caption(rendered.note)
    try:
        from fusionviz.ui.graph_component import graph_click, svg_for

        svg = svg_for(rendered.dot)  # laid out once per DOT text, in the viewer's byte-bounded LRU
    except ImportError:
        logger.info("graph component missing; drawing with st.graphviz_chart")
    except errors.FusionvizError as exc:
        logger.info("server-side layout failed, drawing in the browser: %s", exc)
    except Exception:  # noqa: BLE001 - fall back to the browser renderer
        logger.exception("server-side layout failed; falling back to st.graphviz_chart")
    else:
        try:
            return graph_click(svg, key=key, height=height, selected=st.session_state.get(state.SELECTED))
        except Exception:  # noqa: BLE001 - fall back to the browser renderer
            logger.exception("graph component failed; falling back to st.graphviz_chart")
    st.graphviz_chart(rendered.dot, width="stretch")
    return None


def toggle_scope(path: str) -> None:
    """Open a collapsed block (or close an open one)."""
    opts = dict(st.session_state.get(state.GRAPH_OPTS) or {})
    expanded = list(opts.get("expanded", ()))
    if path in expanded:
        expanded.remove(path)
    else:
        expanded.append(path)
    opts["expanded"] = expanded
    st.session_state[state.GRAPH_OPTS] = opts


def fmt_bytes(n: float | int | None) -> str:
    """Human-readable bytes (KB/MB/GB, powers of 1024)."""
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def fmt_count(n: float | int | None) -> str:
    """Compact count: 1.2 k, 3.4 M, 5.6 G."""
    if n is None:
        return "-"
    n = float(n)
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n:.0f}"


# ------------------------------------------------------------------ verification and exports


def verification(loaded: Any, result: Any) -> Any:
    """The cached verification of ``result`` on the current inputs (None: no pass selected)."""
    from fusionviz.passes import all_passes

    names = state.passes()
    if not names:
        return None
    exact = all(p.exact for p in all_passes() if p.name in names)
    inputs = state.input_plan(loaded)
    if inputs.plan is None:
        from fusionviz.verify import VerifyResult

        return VerifyResult(False, (), 1e-4, error=f"no inputs to run: {inputs.error}", report_only=not exact)
    return cache.verify(pipeline_key(loaded, names)[0], tuple(names), inputs.key, exact, result.original,
                        result.final, inputs.plan)


def cli_model_arg(loaded: Any) -> str:
    """How the CLI names the current model: the sample name, else the model's file name."""
    org = state.origin()
    return org["name"] if org.get("kind") == "sample" else loaded.name


def build_report(loaded: Any, result: Any, verify_result: Any = None, bench: dict | None = None) -> dict:
    """The report (``fusionviz.report``) of the current model, passes, inputs and results.

    Args:
        loaded: the current model.
        result: the current pipeline result.
        verify_result: its verification, or None.
        bench: ``{"results": [...], "context": {...}}`` of a benchmark of this model, or None.
    """
    from fusionviz import report
    from fusionviz.inputs import SET_NAMES

    inputs = state.input_plan(loaded)
    plan = inputs.plan
    data = state.user_data(loaded)
    names = [r.name for r in result.reports]
    sets = list(SET_NAMES) + (["user"] if data else [])
    command = report.cli_command(cli_model_arg(loaded), names, shapes=state.pipeline_shapes(plan),
                                 values=dict(inputs.spec.values), inputs_file=data["label"] if data else None,
                                 output=export_name(loaded))
    notes = [f"inputs: {inputs.error}"] if inputs.error else []
    ctx = (bench or {}).get("context") or {}
    return report.build(
        model_name=loaded.name, sha256=loaded.sha256, source=state.source_words(), result=result, plan=plan,
        input_sets=sets, verification=verify_result, bench=(bench or {}).get("results"),
        bench_settings=ctx.get("settings"), command=command, notes=notes)


def export_name(loaded: Any) -> str:
    """File name of the optimized model's download."""
    return f"{loaded.name.rsplit('.', 1)[0]}.fusionviz.onnx"


def exports(loaded: Any, result: Any, verify_result: Any = None, bench: dict | None = None) -> None:
    """Download buttons: the optimized model (.onnx), the report as JSON, as one HTML page (both
    graphs drawn) and as Markdown.

    The files are made when a button is pressed (the model's bytes are not kept per session).
    """
    from fusionviz import report, report_html

    final = result.final
    rep = build_report(loaded, result, verify_result, bench)
    stem = loaded.name.rsplit(".", 1)[0]
    c = st.columns(4)
    from fusionviz import model_io

    files = [  # (column, label, make the bytes, file name, mime, key, help)
        (1, "Report (JSON)", lambda: report.to_json(rep), f"{stem}.fusionviz.json", "application/json", "dl_json",
         None),
        (2, "Report (HTML)", lambda: report_html.render(rep, before=result.original, after=final),
         f"{stem}.fusionviz.html", "text/html", "dl_html",
         "One page that opens offline: both graphs, the passes, near misses, verification, environment and the "
         "command."),
        (3, "Report (Markdown)", lambda: report.markdown(rep), f"{stem}.fusionviz.md", "text/markdown", "dl_md", None),
    ]
    if final.ByteSize() + model_io.bytes_on_disk(final) > model_io.PROTO_MAX_BYTES:
        c[0].caption("The optimized model is over 2 GB, too big for one file: the command in the report "
                     "writes it with its weights beside it (OUT.onnx.data).")
    else:
        files.insert(0, (0, "Optimized model (.onnx)", lambda: model_io.one_file_bytes(final), export_name(loaded),
                         "application/octet-stream", "dl_model",
                         "The model after the selected passes, as the command in the report writes it (one file: "
                         "weights kept on disk are read into it)."))
    for col, label, make, name, mime, key, tip in files:
        c[col].download_button(label, make, file_name=name, mime=mime, key=key, icon=":material/download:",
                               width="stretch", on_click="ignore", help=tip)
    if rep.get("command"):
        st.caption("Reproduce on the command line:")
        st.code(rep["command"], language="bash", wrap_lines=True)
