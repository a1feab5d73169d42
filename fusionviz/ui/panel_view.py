"""The Graph page's side panel: the selected node and what stands for it on the other side,
beside the panes.

Rules (the code points back to them):

1. The panel is a column of the panes' height to the right of them (it scrolls on its own, so
   the wheel over the panes still zooms them). With nothing selected it says how to select.
2. The selected node comes first, in full (``graphview.panel.node_panel``): op and change class,
   name and scope, the overlays' values at it (time, bytes written, error: whatever has been
   computed for the pair), what changed, what it absorbed or went into, near misses, attributes,
   inputs and outputs (dtype, shape, bytes), weights (shape, dtype, bytes, min/max/mean).
3. Then the other side: the nodes linked to it (what it became or came from, ``graphview.Links``),
   with their total time and bytes written when those overlays were computed
   (``graphview.panel.totals``), the first one open and the others (up to :data:`MAX_OTHERS`) one
   click away.
4. Everything is built outside the page (graphview); here it is only laid out, as compact HTML
   with every text escaped.
5. Several nodes selected (``selection_view``): one compact table of them (side, op, name,
   change class, each computed overlay's value; ``graphview.panel`` rule 7) with the totals of
   time and bytes written per side, then the nodes that stand for them in the other pane with
   their totals, and the card of the first one selected below.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any

import onnx
import streamlit as st

from fusionviz import errors

#: Rule 3: linked nodes shown on the other side.
MAX_OTHERS = 6
#: Rows per tensor table before "… N more".
MAX_ROWS = 12

_CSS = """
<style>
.fv-card { font-size: 0.82rem; line-height: 1.35; }
.fv-card .fv-op { font-size: 1.02rem; font-weight: 700; }
.fv-card .fv-badge { display: inline-block; padding: 0 0.45em; border-radius: 0.6em; border: 1.5px solid;
                     font-size: 0.75rem; margin-left: 0.4em; vertical-align: 0.1em; }
.fv-card .fv-name { font-family: ui-monospace, monospace; font-size: 0.78rem; word-break: break-all; color: #1f2937; }
.fv-card .fv-h { font-weight: 600; margin: 0.55em 0 0.15em 0; color: #374151; font-size: 0.8rem;
                 text-transform: uppercase; letter-spacing: 0.03em; }
.fv-card table { border-collapse: collapse; width: 100%; font-size: 0.76rem; margin: 0; }
.fv-card td { border-top: 1px solid #e5e7eb; padding: 1px 4px 1px 0; vertical-align: top; word-break: break-all; }
.fv-card td.k { color: #6b7280; white-space: nowrap; word-break: normal; width: 1%; }
.fv-card .fv-meas { display: inline-block; background: #f3f4f6; border-radius: 4px; padding: 0 0.4em; margin: 0 0.3em 0.2em 0; }
.fv-card .fv-nm { border-left: 3px solid #db2777; padding-left: 0.4em; margin: 0.2em 0; }
.fv-card .fv-muted { color: #6b7280; }
.fv-card table.fv-sel th { text-align: left; font-weight: 600; color: #374151; padding: 1px 4px 1px 0; }
</style>
"""


def _e(text: object) -> str:
    return html.escape(str(text))


def _bytes(n: int | None) -> str:
    from fusionviz.graphview.build import format_value

    return "" if n is None else format_value(float(n), "B")


def _num(v: float | None) -> str:
    return "" if v is None else f"{v:.4g}"


def card_html(p: Any) -> str:
    """Rule 2: one node's card (``p``: a ``graphview.panel.NodePanel``)."""
    from fusionviz.graphview.dot import STATUS_STYLE, STATUS_TITLE

    out = ["<div class='fv-card'>"]
    badge = ""
    if p.status and p.status != "unchanged":
        fill, border, _ = STATUS_STYLE.get(p.status, ("#f3f4f6", "#6b7280", ""))
        badge = (f"<span class='fv-badge' style='background:{fill};border-color:{border}'>"
                 f"{_e(STATUS_TITLE.get(p.status, p.status))}</span>")
    domain = f" <span class='fv-muted'>{_e(p.domain)}</span>" if p.domain not in ("", "ai.onnx") else ""
    out.append(f"<div><span class='fv-op'>{_e(p.op)}</span>{domain}{badge}</div>")
    out.append(f"<div class='fv-name'>{_e(p.name or p.key)}</div>")
    if p.scope:
        out.append(f"<div class='fv-muted'>scope {_e(p.scope)}</div>")
    if p.measures:
        out.append("<div style='margin-top:0.3em'>" + "".join(
            f"<span class='fv-meas'>{_e(t)} <b>{_e(v)}</b></span>" for t, v in p.measures) + "</div>")
    if p.what:
        out.append("<div class='fv-h'>Changed</div>" + "<br>".join(_e(w) for w in p.what))
    if p.absorbed:
        out.append(f"<div class='fv-h'>Absorbed {len(p.absorbed)} node{'s' if len(p.absorbed) != 1 else ''}</div>"
                   + "<div class='fv-name'>" + "<br>".join(_e(a) for a in p.absorbed[:MAX_ROWS])
                   + (f"<br>… {len(p.absorbed) - MAX_ROWS} more" if len(p.absorbed) > MAX_ROWS else "") + "</div>")
    if p.went_into:
        out.append(f"<div class='fv-h'>Went into</div><div class='fv-name'>{_e(p.went_into)}</div>")
    if p.passes:
        out.append(f"<div class='fv-muted' style='margin-top:0.2em'>by {_e(', '.join(p.passes))}</div>")
    if p.near_misses:
        out.append("<div class='fv-h'>Near misses here</div>")
        for nm in p.near_misses:
            hint = f"<br><span class='fv-muted'>→ {_e(nm.hint)}</span>" if nm.hint else ""
            out.append(f"<div class='fv-nm'><b>{_e(nm.rule)}</b> ({_e(nm.part)}): {_e(nm.reason)}{hint}</div>")
    if p.attributes:
        out.append("<div class='fv-h'>Attributes</div><table>" + "".join(
            f"<tr><td class='k'>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in p.attributes) + "</table>")
    out.append(_tensors("Inputs", p.inputs, inputs=True))
    out.append(_tensors("Outputs", p.outputs, inputs=False))
    if p.weights:
        rows = []
        for w in p.weights[:MAX_ROWS]:
            stats = (f"<br><span class='fv-muted'>min {_num(w.min)} · max {_num(w.max)} · mean {_num(w.mean)}</span>"
                     if w.min is not None else "")
            rows.append(f"<tr><td class='k'>{_e(w.role)}</td><td><span class='fv-name'>{_e(w.name)}</span><br>"
                        f"{_e(w.dtype)} {_e(w.shape)} · {_e(_bytes(w.nbytes))}{stats}</td></tr>")
        out.append("<div class='fv-h'>Weights</div><table>" + "".join(rows) + "</table>")
    out.append("</div>")
    return "".join(out)


def _tensors(title: str, rows: Sequence[Any], *, inputs: bool) -> str:
    if not rows:
        return ""
    body = []
    for t in rows[:MAX_ROWS]:
        size = f" · {_e(_bytes(t.nbytes))}" if t.nbytes is not None else ""
        if inputs:
            where = f"from {_e(t.other[0])}" if t.other else _e(t.kind)
        else:
            n = len(t.other)
            where = f"{n} reader{'s' if n != 1 else ''}" if n else "graph output"
        body.append(f"<tr><td class='k'>{_e(t.role or '')}</td><td><span class='fv-name'>{_e(t.name)}</span><br>"
                    f"{_e(t.dtype)} {_e(t.shape)}{size} <span class='fv-muted'>· {where}</span></td></tr>")
    more = f"<tr><td></td><td>… {len(rows) - MAX_ROWS} more</td></tr>" if len(rows) > MAX_ROWS else ""
    return f"<div class='fv-h'>{title}</div><table>" + "".join(body) + more + "</table>"


@st.cache_data(max_entries=128, show_spinner=False)
def _panel(key: tuple, node: str, side: str, _model: onnx.ModelProto, _diff, _near: tuple, _overlays: tuple):
    """``graphview.panel.node_panel`` (``key`` identifies the pair, its side and the overlays drawn)."""
    from fusionviz.graphview.panel import node_panel

    return node_panel(_model, node, side, diff=_diff, near_misses=_near, overlays=_overlays)


def counterpart_of(links: Any, name: str | None, side: str | None, hint: str) -> Any:
    """The selected node's counterpart (``Links.counterpart``), or None after a caption saying why
    there is none: nothing selected (``hint`` says how to select), or a node of neither graph."""
    if not name:
        st.caption(hint)
        return None
    if side is None:
        st.caption(f"Node `{name}` is in neither graph of this pair.")
        return None
    return links.counterpart(side, name)


def draw(height: int, models: dict[str, onnx.ModelProto], pair_key: tuple, diff: Any, links: Any,
         selection: tuple[str | None, str | None], near_misses: tuple, overlays: dict[str, dict],
         on_focus: Callable[[str | None, str | None], None]) -> None:
    """Rules 1-4: the panel, in a scrolling container of ``height`` pixels.

    ``overlays``: kind -> side -> ``graphview.overlays.Overlay`` (what has been computed)."""
    st.markdown(_CSS, unsafe_allow_html=True)
    box = st.container(height=height, border=True, key="graph_panel")
    name, side = selection
    from fusionviz.ui import selection_view

    chosen = selection_view.items(selection)
    if len(chosen) >= 2:
        with box:
            several(chosen, diff, links, overlays)
            st.divider()
            st.markdown(f"**First selected** · {side}")
            try:
                o = tuple(by_side[side] for by_side in overlays.values() if side in by_side)
                st.markdown(card_html(_panel((*pair_key, side, tuple(ov.kind for ov in o)), name, side,
                                             models[side], diff, near_misses, o)), unsafe_allow_html=True)
            except errors.FusionvizError as exc:
                st.error(str(exc))
        return
    with box:
        cp = counterpart_of(links, name, side, "**Node details.** Click a node in either pane (or search one) to "
                            "see it here on both sides: attributes, inputs and outputs with shapes, weights, "
                            "provenance, near misses, and the overlays' values.")
        if cp is None:
            return

        def ovs(s: str) -> tuple:
            return tuple(by_side[s] for by_side in overlays.values() if s in by_side)

        def panel(s: str, k: str):
            o = ovs(s)
            return _panel((*pair_key, s, tuple(ov.kind for ov in o)), k, s, models[s], diff, near_misses, o)

        head = st.columns([1.5, 1.3], vertical_alignment="center")
        head[0].markdown(f"**{side.capitalize()}** · selected")
        head[1].button("Focus here", key="graph_panel_focus", on_click=on_focus, args=(name, side), width="stretch",
                       help="Draw only this node and its neighbours")
        st.caption(cp.relation)
        try:
            st.markdown(card_html(panel(side, name)), unsafe_allow_html=True)
        except errors.FusionvizError as exc:
            st.error(str(exc))
        other = cp.other_side
        st.divider()
        if not cp.others:
            st.markdown(f"**{other.capitalize()}**: nothing stands for it.")
            return
        n = len(cp.others)
        from fusionviz.graphview.panel import totals

        sums = " · ".join(f"{title} {text}" + (f" ({k} of them)" if k != n else "")
                          for title, text, k in totals(cp.others, ovs(other)))
        st.markdown(f"**{other.capitalize()}**: {n} node{'s' if n != 1 else ''}"
                    + (f" · in total: {sums}" if sums else ""))
        for i, (k, op) in enumerate(list(zip(cp.others, cp.other_ops, strict=True))[:MAX_OTHERS]):
            with st.expander(f"{op} · {k}", expanded=i == 0):
                try:
                    st.markdown(card_html(panel(other, k)), unsafe_allow_html=True)
                except errors.FusionvizError as exc:
                    st.error(str(exc))
        if n > MAX_OTHERS:
            st.caption(f"... and {n - MAX_OTHERS} more.")


def table_html(table: Any) -> str:
    """Rule 5: the selected nodes as one table (``table``: a ``graphview.panel.SelectionTable``)."""
    from fusionviz.graphview.dot import STATUS_STYLE, STATUS_TITLE

    head = "".join(f"<th>{_e(c)}</th>" for c in ("", "op", "name", "change", *table.columns))
    rows = []
    for r in table.rows:
        fill, border, _ = STATUS_STYLE.get(r.status, ("#fff", "#d1d5db", ""))
        change = (f"<span class='fv-badge' style='background:{fill};border-color:{border};margin:0'>"
                  f"{_e(STATUS_TITLE.get(r.status, r.status))}</span>") if r.status else ""
        vals = "".join(f"<td>{_e(v)}</td>" for v in r.values)
        rows.append(f"<tr><td class='k'>{_e(r.side[0].upper())}</td><td><b>{_e(r.op)}</b></td>"
                    f"<td class='fv-name'>{_e(r.key)}</td><td>{change}</td>{vals}</tr>")
    out = [f"<div class='fv-card'><table class='fv-sel'><tr>{head}</tr>{''.join(rows)}</table>"]
    for side, n in table.counts.items():
        sums = " · ".join(f"{_e(t)} <b>{_e(v)}</b>" + (f" ({k} of {n})" if k != n else "")
                          for t, v, k in table.totals.get(side, ()))
        out.append(f"<div style='margin-top:0.3em'><b>{_e(side.capitalize())}</b>: {n} selected"
                   + (f" · in total: {sums}" if sums else "") + "</div>")
    out.append("<div class='fv-muted' style='margin:0.2em 0 0.6em 0'>A: after pane · B: before pane</div></div>")
    return "".join(out)


def several(chosen: Sequence[tuple[str, str]], diff: Any, links: Any, overlays: dict[str, dict]) -> None:
    """Rule 5: the table of the selection, then its counterparts with their totals."""
    from fusionviz.graphview.panel import selection_table, totals
    from fusionviz.ui import selection_view

    st.markdown(f"**{len(chosen)} nodes selected** · shift-click adds or removes one, a plain click selects one")
    st.markdown(table_html(selection_table(chosen, links.op, diff, overlays)), unsafe_allow_html=True)
    for other, keys in selection_view.counterparts(links, chosen).items():
        ovs = [by_side[other] for by_side in overlays.values() if other in by_side]
        sums = " · ".join(f"{t} {v}" + (f" ({k} of them)" if k != len(keys) else "")
                          for t, v, k in totals(keys, ovs))
        st.markdown(f"**Counterparts in the {other} pane**: {len(keys)} node{'s' if len(keys) != 1 else ''} "
                    "(dashed)" + (f" · in total: {sums}" if sums else ""))
        ops = ", ".join(f"{links.op(other, k)} {k}" for k in keys[:MAX_OTHERS])
        st.caption(ops + (f" … and {len(keys) - MAX_OTHERS} more" if len(keys) > MAX_OTHERS else ""))
