"""Graph page: before and after side by side, diff colours and counts, search, focus, details."""

from __future__ import annotations

import logging

import onnx
import streamlit as st

from fusionviz import errors
from fusionviz.ui import cache, common, state

logger = logging.getLogger(__name__)

ORT_LEVELS = ("basic", "extended", "layout", "all")


def reference_graph(loaded, level: str, original: onnx.ModelProto) -> onnx.ModelProto:
    """onnxruntime's own optimized graph of ``original`` at ``level`` (cached per model hash)."""
    got = cache.reference(loaded.sha256, f"ort:{level}", state.shapes_key(), original)
    if isinstance(got, errors.FusionvizError):
        raise got
    if not isinstance(got, onnx.ModelProto):
        raise errors.PassError(f"onnxruntime's '{level}' graph is not available for this model.")
    return got


def compare_options(result) -> dict[str, str]:
    """Compare-pair choices: value -> label."""
    opts = {"current": f"original → current ({result.nodes_before} → {result.nodes_after} nodes)"}
    for k, rep in enumerate(result.reports, start=1):
        n = len(rep.changes)
        opts[f"step:{k}"] = f"step {k}: {rep.title} ({n} change{'s' if n != 1 else ''})"
    for level in ORT_LEVELS:
        opts[f"ort:{level}"] = f"original → onnxruntime's own graph at level '{level}'"
    return opts


def pick_pair(loaded, result, choice: str):
    """(before, after, key, caption) for a compare choice."""
    if choice.startswith("step:"):
        k = int(choice.split(":", 1)[1])
        if 1 <= k < len(result.snapshots):
            before, after = result.snapshots[k - 1], result.snapshots[k]
            return before.model, after.model, (*common.pipeline_key(loaded, state.passes()), k), \
                f"Before and after pass **{result.reports[k - 1].title}** (step {k} of {len(result.reports)})."
    if choice.startswith("ort:"):
        level = choice.split(":", 1)[1]
        try:
            match = reference_graph(loaded, level, result.original)
        except errors.FusionvizError as exc:
            st.warning(f"{exc} Showing original → current instead.")
        else:
            return result.original, match, (loaded.sha256, "ort", level, state.shapes_key()), \
                f"The original model and the graph onnxruntime itself produces at level **{level}** " \
                "(saved with `optimized_model_filepath`; 'layout'/'all' use this CPU's NCHWc kernels)."
    return result.original, result.final, (*common.pipeline_key(loaded, state.passes()), "final"), \
        f"The original model and the model after the **{len(result.reports)} selected passes**."


def _set_opt(name: str, widget_key: str) -> None:
    opts = dict(st.session_state.get(state.GRAPH_OPTS) or {})
    opts[name] = st.session_state[widget_key]
    st.session_state[state.GRAPH_OPTS] = opts


def _set_compare() -> None:
    st.session_state[state.COMPARE] = st.session_state["graph_compare"]


def _set_focus(name: str | None) -> None:
    st.session_state[state.FOCUS] = name
    if name:
        st.session_state[state.SELECTED] = name


def node_names(model: onnx.ModelProto) -> list[tuple[str, str]]:
    """(name, op_type) of the main graph's nodes."""
    return [(n.name, n.op_type) for n in model.graph.node]


def search(models: list[onnx.ModelProto], text: str, limit: int = 50) -> list[str]:
    """Node names whose name contains ``text`` or whose op type equals it (case-insensitive)."""
    t = text.strip().lower()
    if not t:
        return []
    hits: list[str] = []
    for m in models:
        for name, op in node_names(m):
            if (t in name.lower() or t == op.lower()) and name not in hits:
                hits.append(name)
                if len(hits) >= limit:
                    return hits
    return hits


def _controls(result) -> None:
    opts = st.session_state.get(state.GRAPH_OPTS) or {}
    choices = compare_options(result)
    current = st.session_state.get(state.COMPARE, "current")
    if current not in choices:
        current = "current"
    state.seed("graph_compare", current)
    st.selectbox("Compare", list(choices), format_func=choices.get, key="graph_compare",
                 on_change=_set_compare)
    c = st.columns([1, 1, 1, 1])
    state.seed("graph_collapse", bool(opts.get("collapse", True)))
    c[0].toggle("Collapse repeated blocks", key="graph_collapse", on_change=_set_opt,
                args=("collapse", "graph_collapse"),
                help="Fold name scopes (layer.3/attention/...) into one box each.")
    state.seed("graph_changed_only", bool(opts.get("changed_only", False)))
    c[1].toggle("Changed regions only", key="graph_changed_only", on_change=_set_opt,
                args=("changed_only", "graph_changed_only"),
                help="Draw only what the passes changed, with a few hops of context.")
    state.seed("graph_stacked", bool(opts.get("stacked", False)))
    c[2].toggle("Stack vertically", key="graph_stacked", on_change=_set_opt,
                args=("stacked", "graph_stacked"), help="For narrow screens.")
    state.seed("graph_hops", int(opts.get("hops", 2)))
    c[3].slider("Hops around focus", 1, 6, key="graph_hops", on_change=_set_opt,
                args=("hops", "graph_hops"))


def _search_box(before, after) -> None:
    c1, c2, c3 = st.columns([2, 2, 1])
    text = c1.text_input("Search a node by name or op type", key="graph_search",
                         placeholder="e.g. Conv, /layer1/, Softmax")
    hits = search([after, before], text) if text else []
    if text and not hits:
        c2.caption(f"No node matches '{text}'.")
    if hits:
        pick = c2.selectbox(f"{len(hits)} match{'es' if len(hits) != 1 else ''}", hits,
                            key="graph_search_pick")
        c3.button("Focus", key="graph_focus_btn", on_click=_set_focus, args=(pick,),
                  width="stretch")
    focus = st.session_state.get(state.FOCUS)
    if focus:
        f1, f2 = st.columns([4, 1])
        f1.markdown(f"Focused on **`{focus}`** (± {st.session_state[state.GRAPH_OPTS].get('hops', 2)} hops).")
        f2.button("Show whole graph", key="graph_clear_focus", on_click=_set_focus, args=(None,),
                  width="stretch")


def _side_focus(model: onnx.ModelProto, focus: str | None, diff, side: str) -> str | None:
    """The focus node for one side: the node itself, or (after) the node made from it, or (before)
    the first original node it came from."""
    if not focus:
        return None
    names = {n.name for n in model.graph.node}
    if focus in names:
        return focus
    if side == "after":
        target = (getattr(diff, "fused_into", None) or {}).get(focus)
        if target in names:
            return target
        for new, srcs in (getattr(diff, "provenance", None) or {}).items():
            if focus in (srcs or ()) and new in names:
                return new
    else:
        for src in (getattr(diff, "contributors", None) or {}).get(focus, ()) or ():
            if src in names:
                return src
    return None


def _draw_side(model, diff, side: str, key: tuple, focus: str | None, height: int):
    with common.guard(f"drawing the {side} graph"):
        return _draw_side_unguarded(model, diff, side, key, focus, height)
    return None


def _draw_side_unguarded(model, diff, side: str, key: tuple, focus: str | None, height: int):
    opts = common.render_options(focus=_side_focus(model, focus, diff, side))
    rendered = cache.render(key, side, opts, model, diff)
    st.caption(f"{rendered.drawn} of {rendered.total} nodes drawn")
    st.session_state.setdefault("fv_scopes", {})[side] = dict(getattr(rendered, "scope_ids", {}) or {})
    return common.show_graph(rendered, key=f"graph_{side}", height=height)


def _details(before, after, diff, pair_key: tuple) -> None:
    name = st.session_state.get(state.SELECTED)
    if not name:
        st.caption("Click a node (or focus one from the search) to see its attributes, shapes, "
                   "weights and provenance.")
        return
    names_after = {n.name for n in after.graph.node}
    model, which = (after, "after") if name in names_after else (before, "before")
    if name not in {n.name for n in model.graph.node}:
        st.caption(f"Node `{name}` is in neither graph of this pair.")
        return
    details = cache.node_details((*pair_key, which), name, model)
    st.markdown(f"**Node `{name}`** ({which})")
    status = (getattr(diff, "status_after", {}) if which == "after" else getattr(diff, "status_before", {})) or {}
    if name in status:
        st.caption(f"diff status: {getattr(status[name], 'value', status[name])}")
    c1, c2 = st.columns([1, 1])
    c1.button("Focus here", key="graph_details_focus", on_click=_set_focus, args=(name,))
    st.json(details, expanded=1)


def _set_expanded() -> None:
    opts = dict(st.session_state.get(state.GRAPH_OPTS) or {})
    opts["expanded"] = list(st.session_state["graph_expanded"])
    st.session_state[state.GRAPH_OPTS] = opts


def _blocks() -> None:
    """Open collapsed blocks by name (clicking a block in the pan/zoom view does the same)."""
    scopes = st.session_state.get("fv_scopes") or {}
    paths = sorted({p for side in scopes.values() for p in side.values()})
    opened = list((st.session_state.get(state.GRAPH_OPTS) or {}).get("expanded", ()))
    if not paths and not opened:
        return
    options = sorted(set(paths) | set(opened))
    state.seed("graph_expanded", [p for p in opened if p in options])
    st.multiselect("Open collapsed blocks", options, key="graph_expanded", on_change=_set_expanded,
                   help="Blocks are name scopes drawn as one box; open one to see its nodes.")


def body() -> None:
    """The Graph page."""
    loaded = common.require_model()
    st.title("Graph: before and after")
    result = common.current_pipeline()
    _controls(result)
    choice = st.session_state.get(state.COMPARE, "current")
    before, after, key, caption = pick_pair(loaded, result, choice)
    diff = cache.diff(key, before, after)
    st.markdown(caption)
    common.legend(getattr(diff, "counts", None))
    _search_box(before, after)
    stacked = bool((st.session_state.get(state.GRAPH_OPTS) or {}).get("stacked"))
    focus = st.session_state.get(state.FOCUS)
    clicked = None
    if stacked:
        st.markdown("##### Before")
        clicked = _draw_side(before, diff, "before", key, focus, 520) or clicked
        st.markdown("##### After")
        clicked = _draw_side(after, diff, "after", key, focus, 520) or clicked
    else:
        left, right = st.columns(2)
        with left:
            st.markdown("##### Before")
            c = _draw_side(before, diff, "before", key, focus, 680)
            clicked = c or clicked
        with right:
            st.markdown("##### After")
            c = _draw_side(after, diff, "after", key, focus, 680)
            clicked = c or clicked
    if clicked is not None:
        kind, value = clicked
        if kind == "scope":
            common.toggle_scope(value)
            st.rerun()
        elif value != st.session_state.get(state.SELECTED):
            st.session_state[state.SELECTED] = value
    _blocks()
    with st.expander("Node details", expanded=bool(st.session_state.get(state.SELECTED))):
        try:
            _details(before, after, diff, key)
        except errors.FusionvizError as exc:
            st.error(str(exc))


def render() -> None:
    """Draw the page under the error guard."""
    common.page("Graph", body)


if __name__ == "__main__":
    render()
