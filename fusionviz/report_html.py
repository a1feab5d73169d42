"""The report as one self-contained HTML file that opens offline.

:func:`render` turns a report dict (:func:`fusionviz.report.build`) and the two models it
describes into one page: the before and after graphs, the passes, near misses, verification,
bisection, per-tensor errors, benchmark, environment and the reproducing command.

Rules:

1. **Self-contained.** No external URL anywhere: no script, font, stylesheet or image is
   fetched; styles, the pan/zoom script and every chart are inline (charts are drawn as inline
   SVG, about 2 kB each, where plotly's inline bundle would add 4.8 MB). The only ``http`` in
   the file is the SVG namespace. The file opens from ``file://`` with the network off.
2. **The same dict.** Every figure on the page comes from the report dict, and the page embeds
   that dict's JSON text (:func:`fusionviz.report_json.to_json`, ``<``, ``>`` and ``&`` as ``\\u``
   escapes) in a
   ``<script type="application/json" id="fusionviz-report">`` element, so the JSON export and
   the HTML never disagree and the page can be read by a program.
3. **Graphs** are drawn by :func:`fusionviz.graphview.render_graph` with the diff of the two
   models and laid out by the in-process SVG renderer the app uses: fused nodes carry what they
   came from, removed ones where they went; near misses of every pass are drawn on the
   optimized graph (matched nodes dashed, the blocker marked with its reason). Above
   ``max_nodes`` nodes name scopes are collapsed into blocks (and what still does not fit is
   cut); the page says what was left out. A graph that cannot be drawn is a sentence, not a
   failure of the report.
4. Everything from the model or the user is HTML-escaped; the SVG comes through
   ``graphview.svg``'s own check (no script, no handlers), minus its XML prolog and comments.
"""

from __future__ import annotations

import html
import logging
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

logger = logging.getLogger(__name__)

#: Above this many nodes a graph is drawn with its name scopes collapsed (rule 3).
MAX_NODES = 1500
#: Rows listed per table before "and N more (in the JSON)".
MAX_ROWS = 200
#: Changes and near misses listed per pass in the pass table.
MAX_PER_PASS = 60

STATUS_COLOURS = {  # pass status and node status -> (background, text)
    "applied": ("#dcfce7", "#166534"), "unchanged": ("#f1f5f9", "#475569"), "skipped": ("#f1f5f9", "#64748b"),
    "declined": ("#fef3c7", "#92400e"), "failed": ("#fee2e2", "#991b1b"),
    "fused": ("#b7efc5", "#14532d"), "added": ("#b7efc5", "#14532d"), "changed": ("#ffe2a8", "#7c2d12"),
}


def _e(text: Any) -> str:
    return html.escape("" if text is None else str(text), quote=True)


def _num(v: Any, digits: int = 3) -> str:
    if v is None or v == "":
        return ""
    if isinstance(v, str):
        return _e(v)
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if not math.isfinite(v):
        return _e(str(v))
    if v == 0:
        return "0"
    if abs(v) < 1e-3 or abs(v) >= 1e5:
        return f"{v:.{digits - 1}e}"
    return f"{v:.{digits}g}"


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def _badge(status: str) -> str:
    bg, fg = STATUS_COLOURS.get(status, ("#f1f5f9", "#334155"))
    return f'<span class="badge" style="background:{bg};color:{fg}">{_e(status)}</span>'


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], *, cls: str = "", total: int | None = None,
           what: str = "rows") -> str:
    """An HTML table; cells are HTML already (escape before). ``total`` > len(rows) says how many
    more the JSON holds."""
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    more = ""
    if total is not None and total > len(rows):
        more = f'<p class="muted">… and {total - len(rows):,} more {_e(what)} (all of them are in the embedded JSON).</p>'
    return f'<div class="tablewrap"><table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>{more}'


# ------------------------------------------------------------------ charts (inline SVG, rule 1)


def bar_chart(rows: Sequence[tuple[str, float, float | None, float | None]], *, unit: str, title: str,
              colour: str = "#2563eb", highlight: Sequence[bool] | None = None) -> str:
    """Horizontal bars with an optional interval whisker per bar, as inline SVG.

    Args:
        rows: ``(label, value, low, high)``; ``low``/``high`` None for no whisker.
        unit: the value's unit, printed after each value.
        title: the chart's title (an SVG ``<title>`` and the caption).
        colour: the bars' fill.
        highlight: per row, True draws the bar darker (e.g. the final model).
    """
    vals = [r[1] for r in rows if r[1] is not None and math.isfinite(r[1])]
    if not vals:
        return ""
    hi = max([*vals, *(r[3] for r in rows if r[3] is not None and math.isfinite(r[3]))]) or 1.0
    label_w, bar_w, row_h, pad = 260, 460, 22, 8
    width, height = label_w + bar_w + 120, pad * 2 + row_h * len(rows)
    parts = [f'<svg class="chart" role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
             f"<title>{_e(title)}</title>"]
    for i, (label, value, low, high) in enumerate(rows):
        y = pad + i * row_h
        short = label if len(label) <= 38 else label[:36] + "…"
        parts.append(f'<text x="{label_w - 8}" y="{y + 15}" text-anchor="end" class="cl">{_e(short)}'
                     f"<title>{_e(label)}</title></text>")
        if value is None or not math.isfinite(value):
            parts.append(f'<text x="{label_w + 4}" y="{y + 15}" class="cv">no value</text>')
            continue
        w = max(1.0, bar_w * value / hi)
        fill = colour if not (highlight and highlight[i]) else "#1e3a8a"
        parts.append(f'<rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}" rx="2" fill="{fill}"/>')
        end = w
        if low is not None and high is not None and math.isfinite(low) and math.isfinite(high):
            x1, x2 = label_w + bar_w * low / hi, label_w + bar_w * high / hi
            ym = y + row_h / 2
            parts.append(f'<path d="M{x1:.1f} {ym:.1f}H{x2:.1f}M{x1:.1f} {ym - 5:.1f}V{ym + 5:.1f}'
                         f'M{x2:.1f} {ym - 5:.1f}V{ym + 5:.1f}" stroke="#111827" stroke-width="1.3" fill="none"/>')
            end = max(end, bar_w * high / hi)
        parts.append(f'<text x="{label_w + end + 6:.1f}" y="{y + 15}" class="cv">{_num(value)} {_e(unit)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _nodes_chart(report: Mapping[str, Any]) -> str:
    passes = report.get("passes") or []
    if report.get("nodes_before") is None:
        return ""
    rows: list[tuple[str, float, None, None]] = [("original", float(report["nodes_before"]), None, None)]
    prev = report["nodes_before"]
    for p in passes:
        after = p.get("nodes_after")
        if p.get("status") == "applied" and after is not None and after != prev:
            rows.append((p.get("name") or "", float(after), None, None))
            prev = after
    rows.append(("optimized", float(report.get("nodes_after") or 0), None, None))
    hl = [False] * (len(rows) - 1) + [True]
    return bar_chart(rows, unit="nodes", title="Nodes after each pass that changed the count",
                     colour="#60a5fa", highlight=hl)


def _bench_chart(bench: Mapping[str, Any]) -> str:
    rows = [(str(v.get("variant") or ""), v.get("median_ms"), v.get("ci_low_ms"), v.get("ci_high_ms"))
            for v in bench.get("variants") or [] if v.get("median_ms") is not None]
    if not rows:
        return ""
    return bar_chart(rows, unit="ms", title="Median latency with its 95% interval", colour="#f59e0b")


# ------------------------------------------------------------------ graphs (rule 3)

_PROLOG = re.compile(r"<\?xml[^>]*\?>|<!DOCTYPE[^>]*>|<!--.*?-->", re.DOTALL)


def _inline_svg(svg: str) -> str:
    """Rule 4: the drawing without its XML prolog, doctype and comments (the doctype names a URL)."""
    return _PROLOG.sub("", svg).strip()


def near_miss_options(report: Mapping[str, Any]) -> tuple:
    """``RenderOptions.near_misses`` for every near miss of the report's passes."""
    out = []
    for p in report.get("passes") or []:
        for n in p.get("near_misses") or []:
            out.append((tuple(n.get("nodes") or ()), n.get("blocker"), str(n.get("reason") or "")))
    if len(out) == 1:
        # One near miss alone makes render_graph cut the picture to its neighbourhood (the Graph
        # page's view of one site); the report draws the whole graph, so add an entry that marks
        # no node.
        out.append(((), None, ""))
    return tuple(out)


def draw_graphs(report: Mapping[str, Any], before: Any, after: Any, *, max_nodes: int = MAX_NODES) -> dict:
    """Both graphs as inline SVG (rule 3).

    Returns:
        ``{"before": side, "after": side, "diff": summary line, "provenance": rows,
        "drawn_keys": node keys drawn on the after side}``; a side is ``{"svg", "drawn",
        "total", "note", "legend", "error"}``.
    """
    from fusionviz import errors
    from fusionviz.graphview import RenderOptions, diff_models, render_graph, render_svg

    out: dict[str, Any] = {"diff": "", "provenance": [], "drawn_keys": set()}
    try:
        diff = diff_models(before, after)
    except Exception as exc:  # noqa: BLE001 - a report without colours beats no report
        logger.warning("report: no diff: %s", exc)
        diff = None
    if diff is not None:
        out["diff"] = diff.summary()
        for key, status in diff.status_after.items():
            if status in ("fused", "added", "changed"):
                out["provenance"].append((key, status, list(diff.provenance.get(key) or []),
                                          list(diff.passes.get(key) or []), list(diff.what.get(key) or [])))
    near = near_miss_options(report)
    for side, model in (("before", before), ("after", after)):
        opts = RenderOptions(auto_collapse=True, max_nodes=max_nodes, legend=False,
                             near_misses=near if side == "after" else ())
        entry: dict[str, Any] = {"svg": "", "drawn": 0, "total": 0, "note": None, "legend": (), "error": None}
        try:
            rendered = render_graph(model, diff=diff, side=side, options=opts)
            entry.update(drawn=rendered.drawn, total=rendered.total, note=rendered.note, legend=rendered.legend)
            if side == "after":
                out["drawn_keys"] = set(rendered.item_ids)
            entry["svg"] = _inline_svg(render_svg(rendered.dot))
        except errors.FusionvizError as exc:
            entry["error"] = str(exc)
        except Exception as exc:  # noqa: BLE001 - rule 3: a sentence, not a failed report
            logger.warning("report: graph not drawn", exc_info=True)
            entry["error"] = f"the graph could not be drawn ({type(exc).__name__}: {exc})"
        out[side] = entry
    return out


def _legend(entries: Sequence[tuple[str, str, str]]) -> str:
    items = []
    for title, fill, border in entries:
        items.append(f'<span class="sw"><i style="background:{_e(fill)};border-color:{_e(border)}"></i>{_e(title)}</span>')
    return f'<div class="legend">{"".join(items)}</div>' if items else ""


def _graph_pane(title: str, side: Mapping[str, Any]) -> str:
    head = (f'<div class="panehead"><b>{_e(title)}</b> <span class="muted">{side.get("drawn", 0):,} of '
            f'{side.get("total", 0):,} nodes drawn</span><span class="tools">'
            '<button data-act="all" title="The whole graph">all</button>'
            '<button data-act="fit" title="Fit the width">width</button><button data-act="in" title="Zoom in">+</button>'
            '<button data-act="out" title="Zoom out">−</button><button data-act="one" title="Actual size">1:1</button>'
            "</span></div>")
    note = f'<p class="note">{_e(side["note"])}</p>' if side.get("note") else ""
    if side.get("error"):
        body = f'<p class="warn">Not drawn: {_e(side["error"])}</p>'
    else:
        body = f'<div class="pz" tabindex="0">{side.get("svg", "")}</div>'
    return f'<div class="pane">{head}{note}{_legend(side.get("legend") or ())}{body}</div>'


# ------------------------------------------------------------------ sections


def _section(ident: str, title: str, body: str) -> str:
    return f'<section id="{ident}"><h2>{_e(title)}</h2>{body}</section>'


def _summary(report: Mapping[str, Any], graphs: Mapping[str, Any] | None) -> str:
    m = report.get("model") or {}
    v = report.get("verify") or {}
    passes = report.get("passes") or []
    applied = sum(1 for p in passes if p.get("status") == "applied")
    odd = [p for p in passes if p.get("status") in ("declined", "failed")]
    near = sum(int(p.get("near_miss_total") or 0) for p in passes)
    nb, na = report.get("nodes_before"), report.get("nodes_after")
    change = ""
    if nb and na is not None:
        change = f' <span class="muted">({(na - nb) / nb:+.0%})</span>'
    verdict = v.get("verdict") if v else "not verified"
    vcls = "ok" if v and v.get("ok") else ("warn" if not v or v.get("report_only") or v.get("error") else "bad")
    cards = [
        ("Nodes", f"{_num(nb)} → {_num(na)}{change}"),
        ("Passes applied", f"{applied} of {len(passes)}" + (f' <span class="bad">({len(odd)} declined or failed)</span>'
                                                           if odd else "")),
        ("Near misses", f"{near:,}"),
        ("Verification", f'<span class="{vcls}">{_e(verdict)}</span>'),
    ]
    if report.get("bench"):
        cards.append(("Benchmark", f'{len(report["bench"].get("variants") or [])} variants'))
    card_html = "".join(f'<div class="card"><div class="k">{_e(k)}</div><div class="v">{v_}</div></div>'
                        for k, v_ in cards)
    facts = [f"sha256 <code>{_e(m.get('sha256') or '')}</code>" if m.get("sha256") else "",
             f"source: {_e(m.get('source'))}" if m.get("source") else "",
             f"pipeline {_num(report.get('seconds'))} s" if report.get("seconds") is not None else "",
             f"diff: {_e(graphs['diff'])}" if graphs and graphs.get("diff") else ""]
    cmd = report.get("command")
    repro = ('<div class="cmd"><div class="k">Reproduce on the command line <button id="copy" type="button">'
             f'Copy</button></div><pre id="cmd"><code>{_e(cmd)}</code></pre></div>'
             if cmd else '<p class="muted">No pass selected: the optimized model is the original.</p>')
    notes = "".join(f'<p class="note">{_e(n)}</p>' for n in report.get("notes") or [])
    return (f'<div class="cards">{card_html}</div><p class="muted">{" · ".join(f for f in facts if f)}</p>'
            f"{repro}{notes}")


def _inputs(report: Mapping[str, Any]) -> str:
    inp = report.get("inputs") or {}
    lines = inp.get("lines") or []
    sets = inp.get("sets") or []
    body = "".join(f"<li><code>{_e(ln)}</code></li>" for ln in lines)
    out = f"<ul>{body}</ul>" if body else '<p class="muted">No inputs recorded.</p>'
    if sets:
        out += f'<p>Verification input sets: {", ".join(f"<code>{_e(s)}</code>" for s in sets)}</p>'
    return out


def _graphs_section(graphs: Mapping[str, Any] | None) -> str:
    if graphs is None:
        return '<p class="muted">The graphs were not drawn (no models were given to the report).</p>'
    help_ = ('<p class="muted">Drag to pan; Ctrl + wheel (or pinch) to zoom; the wheel scrolls the graph; a double '
             "click goes back to the start. Fused nodes say what they came from (← …); removed nodes say where they went. Near misses are "
             "drawn on the optimized graph: matched nodes dashed violet, the node that blocked the rewrite pink "
             "with the reason.</p>")
    panes = _graph_pane("Before (original)", graphs["before"]) + _graph_pane("After (optimized)", graphs["after"])
    prov = graphs.get("provenance") or []
    table = ""
    if prov:
        rows = [(f"<code>{_e(k)}</code>", _badge(s), _e(" + ".join(src)) or '<span class="muted">—</span>',
                 _e(", ".join(ps)), _e("; ".join(what))) for k, s, src, ps, what in prov[:MAX_ROWS]]
        table = (f"<details><summary>Provenance: what each of the {len(prov):,} new or changed nodes came "
                 "from</summary>"
                 + _table(("node (after)", "status", "came from", "passes", "what changed"), rows, total=len(prov),
                          what="nodes") + "</details>")
    return f'{help_}<div class="panes">{panes}</div>{table}'


def _passes_section(report: Mapping[str, Any]) -> str:
    passes = report.get("passes") or []
    if not passes:
        return '<p class="muted">No pass selected.</p>'
    rows = []
    for i, p in enumerate(passes, start=1):
        why = p.get("declined") or p.get("error") or p.get("note") or ""
        changes = p.get("changes") or []
        near = p.get("near_misses") or []
        detail = ""
        if changes or near:
            items = "".join(f"<li>{_e(c.get('description') or c.get('kind'))}</li>" for c in changes[:MAX_PER_PASS])
            if len(changes) > MAX_PER_PASS:
                items += f'<li class="muted">… {len(changes) - MAX_PER_PASS:,} more</li>'
            nitems = "".join(f"<li>{_near_line(n)}</li>" for n in near[:MAX_PER_PASS])
            total = max(int(p.get("near_miss_total") or 0), len(near))
            kept = f"{len(near):,} of {total:,} near misses" if total > len(near) else _plural(
                len(near), "near miss", "near misses")
            what = [_plural(len(changes), "change") if changes else "", kept if near else ""]
            detail = (f'<details><summary>{" · ".join(w for w in what if w)}</summary>'
                      + (f"<b>Changes</b><ul>{items}</ul>" if items else "")
                      + (f"<b>Near misses</b><ul>{nitems}</ul>" if nitems else "") + "</details>")
        secs = p.get("seconds")
        rows.append((str(i), f"<code>{_e(p.get('name'))}</code><div class=\"muted\">{_e(p.get('title'))}</div>",
                     _badge(str(p.get("status") or "")), f"{len(changes):,}",
                     f"{_num(p.get('nodes_before'))} → {_num(p.get('nodes_after'))}",
                     "" if secs is None else f"{secs * 1000:.0f}",
                     f"{int(p.get('near_miss_total') or 0):,}", _e(why) + detail))
    return _table(("#", "pass", "status", "changes", "nodes", "ms", "near misses", "reason / details"), rows,
                  cls="passes")


def _near_line(n: Mapping[str, Any]) -> str:
    where = f"at <code>{_e(n.get('blocker'))}</code>: " if n.get("blocker") else ""
    hint = f' <span class="muted">— {_e(n.get("hint"))}</span>' if n.get("hint") else ""
    return f"{where}{_e(n.get('reason'))} <span class=\"kind\">{_e(n.get('kind'))}</span>{hint}"


def _near_section(report: Mapping[str, Any], graphs: Mapping[str, Any] | None) -> str:
    drawn = graphs.get("drawn_keys") if graphs else None
    groups = []
    kept = counted = 0
    for p in report.get("passes") or []:
        near = p.get("near_misses") or []
        total = max(int(p.get("near_miss_total") or 0), len(near))
        if not total:
            continue
        kept, counted = kept + len(near), counted + total
        rows = []
        for n in near[:MAX_ROWS]:
            site = [*(n.get("nodes") or []), *([n["blocker"]] if n.get("blocker") else [])]
            shown = ""
            if drawn is not None:
                shown = "yes" if any(k in drawn for k in site) else '<span class="muted">not in the optimized graph</span>'
            rows.append((f"<code>{_e(n.get('blocker') or '—')}</code>", f'<span class="kind">{_e(n.get("kind"))}</span>',
                         _e(n.get("reason")), _e(n.get("hint")), _e(", ".join(n.get("nodes") or [])), shown))
        kinds: dict[str, int] = {}
        for n in near:
            kinds[str(n.get("kind"))] = kinds.get(str(n.get("kind")), 0) + 1
        extra = f", {total - len(near):,} more counted but not kept" if total > len(near) else ""
        head = (f"<code>{_e(p.get('name'))}</code>: {_plural(total, 'near miss', 'near misses')}{extra} "
                f'<span class="muted">({", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))})</span>')
        groups.append((head, _table(("blocked at", "kind", "reason", "what would make it fire", "matched nodes",
                                     "drawn"), rows, total=len(near), what="near misses")))
    if not groups:
        return '<p class="muted">No near misses: no rewrite got past its first node and then stopped.</p>'
    opened = " open" if kept <= 30 else ""
    intro = ("<p>Where a rewrite almost fired: the node that blocked it, why, what would make it fire, and the "
             f"nodes matched so far. {counted:,} near misses"
             + (f" ({counted - kept:,} counted but not kept: a pass keeps at most 50)" if counted > kept else "")
             + ".</p>")
    return intro + "".join(f"<details{opened}><summary>{h}</summary>{t}</details>" for h, t in groups)


def _verify_section(report: Mapping[str, Any]) -> str:
    v = report.get("verify")
    if not v:
        return '<p class="muted">Not verified.</p>'
    cls = "ok" if v.get("ok") else ("warn" if v.get("report_only") or v.get("error") else "bad")
    summary = str(v.get("summary") or "")
    verdict = str(v.get("verdict") or "")
    if summary.lower().startswith(verdict.lower() + ":"):
        summary = summary[len(verdict) + 1:].strip()
    out = [f'<p><b class="{cls}">{_e(verdict)}</b>: {_e(summary)}</p>']
    out.append(f'<p class="muted">Tolerance: |a−b| ≤ atol {_num(v.get("atol"))} + rtol {_num(v.get("rtol"))}·|b| '
               "+ the output's noise floor; input sets: "
               f'{_e(", ".join(v.get("input_sets") or [])) or "none"}.</p>')
    for name, why in v.get("skipped_sets") or []:
        out.append(f'<p class="note">Input set <code>{_e(name)}</code> skipped: {_e(why)}</p>')
    if v.get("failure"):
        out.append(f'<p class="bad">First failure: {_e(v["failure"])}</p>')
    rows = [(_e(o.get("input_set")), f"<code>{_e(o.get('name'))}</code>", _e(o.get("shape")),
             _num(o.get("max_abs_diff")), _num(o.get("max_rel_diff")), _num(o.get("cosine"), 7),
             _num(o.get("floor")), f"{_num(o.get('mismatches'))} / {_num(o.get('size'))}",
             '<span class="ok">yes</span>' if o.get("ok") else '<span class="bad">NO</span>')
            for o in v.get("outputs") or []]
    if rows:
        out.append(_table(("input set", "output", "shape", "max abs", "max rel", "cosine", "noise floor",
                           "beyond tolerance", "ok"), rows[:MAX_ROWS], total=len(rows)))
    return "".join(out)


def _compare_section(cmp_: Mapping[str, Any]) -> str:
    out = [f"<p>{_e(cmp_.get('summary'))}</p>"]
    labels = cmp_.get("labels") or ["A", "B"]
    counts = cmp_.get("counts") or {}
    if counts:
        out.append('<p class="muted">' + " · ".join(f"{_e(k.replace('_', ' '))} {_num(v)}" for k, v in counts.items())
                   + f"; input set <code>{_e(cmp_.get('input_set'))}</code></p>")
    for n in cmp_.get("notes") or []:
        out.append(f'<p class="note">{_e(n)}</p>')
    rows = list(cmp_.get("rows") or [])

    def key(r: Mapping[str, Any]) -> tuple:
        rel = r.get("max_rel")
        rel = float(rel) if isinstance(rel, (int, float)) else math.inf if rel else -1.0
        return (not r.get("ok", True), rel)

    compared = sorted((r for r in rows if r.get("status") == "compared"), key=key, reverse=True)
    table = [(str(r.get("index")), f"<code>{_e(r.get('tensor'))}</code>",
              f"{_e(r.get('op_a'))} <code>{_e(r.get('node_a'))}</code>",
              f"{_e(r.get('op_b'))} <code>{_e(r.get('node_b'))}</code>", _e(r.get("match")),
              _num(r.get("max_abs")), _num(r.get("max_rel")), _num(r.get("cosine"), 7),
              '<span class="ok">yes</span>' if r.get("ok") else '<span class="bad">NO</span>') for r in compared[:MAX_ROWS]]
    if table:
        out.append(f"<p>Compared tensors, those beyond tolerance first, then by max rel error "
                   f"({_e(labels[0])} against {_e(labels[1])}):</p>")
        out.append(_table(("#", "tensor", f"node in {labels[0]}", f"node in {labels[1]}", "matched by", "max abs",
                           "max rel", "cosine", "ok"), table, total=len(compared), what="tensors"))
    return "".join(out)


def _bisect_section(b: Mapping[str, Any]) -> str:
    out = [f"<p>{_e(b.get('summary'))}</p>"]
    for f in b.get("findings") or []:
        reasons = "".join(f"<li><code>{_e(p)}</code>: {_e(r)}</li>" for p, r in (f.get("reasons") or {}).items())
        out.append(f"<p>Set {_e(', '.join(f.get('passes') or []))}"
                   f"{'' if f.get('minimal', True) else ' (not narrowed further)'}: {_e(f.get('failure'))}</p>"
                   f"<ul>{reasons}</ul>")
    probes = [(str(i), _e(", ".join(p.get("passes") or [])), '<span class="bad">fails</span>' if p.get("fails")
               else '<span class="ok">verifies</span>', _num(p.get("seconds")), _e(p.get("verify")))
              for i, p in enumerate(b.get("probes") or [], start=1)]
    if probes:
        out.append(_table(("probe", "passes", "result", "s", "verification"), probes))
    return "".join(out)


def _bench_section(b: Mapping[str, Any]) -> str:
    s = b.get("settings") or {}
    out = []
    if s:
        out.append('<p class="muted">' + " · ".join(f"{_e(k)}: {_e(v)}" for k, v in s.items()) + "</p>")
    chart = _bench_chart(b)
    if chart:
        out.append(f'<figure class="plot">{chart}<figcaption>Median latency per variant; the whisker is the '
                   "95% interval of the median.</figcaption></figure>")
    rows = [(_e(r.get("variant")), _e(r.get("backend")), _e(r.get("settings")), _e(r.get("threads")),
             _num(r.get("median_ms")),
             f"{_num(r.get('ci_low_ms'))} – {_num(r.get('ci_high_ms'))}" if r.get("median_ms") is not None else "",
             f"{_num(r.get('p10_ms'))} – {_num(r.get('p90_ms'))}" if r.get("p10_ms") is not None else "",
             _num(r.get("runs")), _num(r.get("rss_run_mb")), _e(r.get("verify")),
             _e(r.get("error")) + (' <span class="warn">unstable</span>' if r.get("unstable") else ""))
            for r in b.get("variants") or []]
    out.append(_table(("variant", "backend", "level", "threads", "median ms", "95% interval ms", "p10 – p90 ms",
                       "runs", "RSS MB", "verify", "error / note"), rows))
    return "".join(out)


def _environment_section(env: Mapping[str, Any]) -> str:
    if not env:
        return '<p class="muted">Not recorded.</p>'
    facts = [("CPU", env.get("cpu") or "unknown"), ("CPUs (usable / all)", f"{env.get('usable_cpus')} / {env.get('cpu_count')}"),
             ("Python", env.get("python")), ("Platform", env.get("platform")),
             ("Thread variables", ", ".join(f"{k}={v}" for k, v in (env.get("thread_vars") or {}).items()) or "none set"),
             ("Verification threads", "1 (onnxruntime intra-op)")]
    packages = " · ".join(f"<code>{_e(k)}</code> {_e(v)}" for k, v in (env.get("packages") or {}).items())
    rows = [(_e(k), _e(v)) for k, v in facts] + [("Packages", packages)]
    body = "".join(f"<tr><td>{k}</td><td>{v}</td></tr>" for k, v in rows)
    return f'<div class="tablewrap"><table class="env"><tbody>{body}</tbody></table></div>'


# ------------------------------------------------------------------ page

CSS = """
:root{--fg:#0f172a;--muted:#64748b;--line:#e2e8f0;--bg:#f8fafc}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:var(--fg);background:#fff}
header{padding:18px 28px 8px;border-bottom:1px solid var(--line);background:var(--bg)}
header h1{margin:0 0 4px;font-size:22px}
nav{position:sticky;top:0;z-index:5;background:#fff;border-bottom:1px solid var(--line);padding:6px 28px}
nav a{margin-right:14px;color:#1d4ed8;text-decoration:none;font-weight:500}
main{padding:0 28px 40px}
section{margin-top:22px;scroll-margin-top:44px}
section>details{margin:6px 0}
section>details>summary{font-size:14px;color:var(--fg)}
h2{font-size:18px;border-bottom:2px solid var(--line);padding-bottom:4px}
h3{font-size:15px;margin-top:18px}
code{font:12.5px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#f1f5f9;padding:0 3px;border-radius:3px;overflow-wrap:anywhere}
pre{margin:4px 0 0;white-space:pre-wrap;overflow-wrap:anywhere}
pre code{display:block;padding:10px 12px;background:#0f172a;color:#e2e8f0}
.muted{color:var(--muted)}
.ok{color:#15803d;font-weight:600}.bad{color:#b91c1c;font-weight:600}.warn{color:#b45309;font-weight:600}
.note{background:#eff6ff;border-left:3px solid #3b82f6;padding:6px 10px;margin:6px 0}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:14px 0 6px}
.card{border:1px solid var(--line);border-radius:8px;padding:8px 14px;min-width:150px;background:#fff}
.card .k,.cmd .k{font-size:12px;color:var(--muted);text-transform:uppercase;letter-spacing:.03em}
.card .v{font-size:18px;font-weight:600}
.cmd{margin:10px 0}
.cmd .k button{margin-left:8px;text-transform:none;letter-spacing:0}
button{font:inherit;font-size:12px;border:1px solid #cbd5e1;background:#fff;border-radius:5px;padding:2px 8px;cursor:pointer}
button:hover{background:#f1f5f9}
.tablewrap{overflow-x:auto}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
th,td{border-bottom:1px solid var(--line);padding:5px 9px;text-align:left;vertical-align:top}
th{background:var(--bg);font-weight:600;position:sticky;top:0}
table.passes td:nth-child(4),table.passes td:nth-child(6),table.passes td:nth-child(7){text-align:right}
table.env td:first-child{color:var(--muted);white-space:nowrap}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600}
.kind{font-size:11px;background:#ede9fe;color:#5b21b6;border-radius:8px;padding:0 6px}
details summary{cursor:pointer;color:#1d4ed8;font-size:12px}
details ul{margin:4px 0 6px 0;padding-left:18px;max-width:900px}
.panes{display:grid;grid-template-columns:1fr 1fr;gap:14px}
@media (max-width:1100px){.panes{grid-template-columns:1fr}}
.pane{border:1px solid var(--line);border-radius:8px;padding:8px;min-width:0}
.panehead{display:flex;gap:8px;align-items:baseline}
.panehead .tools{margin-left:auto;display:flex;gap:4px}
.legend{display:flex;flex-wrap:wrap;gap:4px 12px;margin:6px 0;font-size:12px}
.sw i{display:inline-block;width:14px;height:11px;border:2px solid;border-radius:3px;margin-right:4px;vertical-align:-1px}
.pz{height:72vh;overflow:auto;border:1px solid var(--line);border-radius:6px;background:#fff;position:relative}
.pz.js{overflow:hidden;cursor:grab;touch-action:none}
.pz.js.drag{cursor:grabbing}
.pz svg{display:block}
.pz.js svg{transform-origin:0 0;position:absolute;left:0;top:0}
figure.plot{margin:8px 0}
figcaption{font-size:12px;color:var(--muted)}
svg.chart .cl{font-size:12px;fill:#334155}
svg.chart .cv{font-size:12px;fill:#0f172a}
footer{padding:14px 28px;color:var(--muted);font-size:12px;border-top:1px solid var(--line)}
"""

JS = """
(function(){
document.querySelectorAll('.pz').forEach(function(box){
  var svg=box.querySelector('svg'); if(!svg) return;
  var w=svg.width.baseVal.value||svg.getBBox().width, h=svg.height.baseVal.value||svg.getBBox().height;
  var s=1,x=0,y=0,drag=null; box.classList.add('js');
  svg.setAttribute('width',w); svg.setAttribute('height',h);
  function apply(){svg.style.transform='translate('+x+'px,'+y+'px) scale('+s+')';}
  function fit(){var bw=box.clientWidth; s=Math.min(1,(bw-8)/w); x=Math.max(4,(bw-w*s)/2); y=4; apply();}
  function all(){var bw=box.clientWidth,bh=box.clientHeight; s=Math.min(1,(bw-8)/w,(bh-8)/h); x=(bw-w*s)/2; y=4; apply();}
  function start(){var bw=box.clientWidth; s=Math.min(1,Math.max(0.6,(bw-8)/w)); x=0; y=4; apply();
    if(w*s<=bw){x=(bw-w*s)/2; apply(); return;}
    var sr=svg.getBoundingClientRect(), top=null, ns=svg.querySelectorAll('g.node');
    for(var i=0;i<Math.min(ns.length,60);i++){var r=ns[i].getBoundingClientRect(); if(!top||r.top<top.top) top=r;}
    x=top?bw/2-((top.left+top.right)/2-sr.left):(bw-w*s)/2;
    x=Math.min(4,Math.max(bw-w*s-4,x)); apply();}
  function zoom(k,mx,my){var ns=Math.min(8,Math.max(0.02,s*k)); x=mx-(mx-x)*ns/s; y=my-(my-y)*ns/s; s=ns; apply();}
  box.addEventListener('wheel',function(e){e.preventDefault(); var r=box.getBoundingClientRect();
    if(e.ctrlKey||e.metaKey){zoom(Math.exp(-e.deltaY*0.002),e.clientX-r.left,e.clientY-r.top);}
    else{x-=e.deltaX; y-=e.deltaY; apply();}},{passive:false});
  box.addEventListener('pointerdown',function(e){drag=[e.clientX-x,e.clientY-y]; box.classList.add('drag'); box.setPointerCapture(e.pointerId);});
  box.addEventListener('pointermove',function(e){if(!drag) return; x=e.clientX-drag[0]; y=e.clientY-drag[1]; apply();});
  function up(){drag=null; box.classList.remove('drag');}
  box.addEventListener('pointerup',up); box.addEventListener('pointercancel',up);
  var tools=box.parentNode.querySelector('.tools');
  if(tools) tools.addEventListener('click',function(e){var a=e.target.getAttribute('data-act'); if(!a) return;
    var cx=box.clientWidth/2, cy=box.clientHeight/2;
    if(a==='fit') fit(); else if(a==='all') all(); else if(a==='in') zoom(1.4,cx,cy); else if(a==='out') zoom(1/1.4,cx,cy);
    else if(a==='one'){s=1; x=4; y=4; apply();}});
  start();
  box.addEventListener('dblclick',start);
});
var b=document.getElementById('copy');
if(b) b.addEventListener('click',function(){var t=document.querySelector('#cmd code').textContent;
  function sel(){var r=document.createRange(); r.selectNodeContents(document.querySelector('#cmd code'));
    var s=window.getSelection(); s.removeAllRanges(); s.addRange(r);}
  try{navigator.clipboard.writeText(t).then(function(){b.textContent='Copied';},sel);}catch(e){sel();}});
})();
"""


def render(report: Mapping[str, Any], *, before: Any = None, after: Any = None, max_nodes: int = MAX_NODES) -> str:
    """The report as one self-contained HTML page (rules 1-4).

    Args:
        report: a dict from :func:`fusionviz.report.build`.
        before: the original model (ModelProto) the report describes, or None.
        after: the optimized model, or None (both are needed to draw the graphs).
        max_nodes: above this many nodes a graph's name scopes are collapsed.

    Returns:
        The HTML text.
    """
    from fusionviz.report_json import to_json

    graphs = draw_graphs(report, before, after, max_nodes=max_nodes) if before is not None and after is not None else None
    m = report.get("model") or {}
    name = m.get("name") or "model"
    sections = [
        ("summary", "Summary", _summary(report, graphs)),
        ("graphs", "Graphs: before and after", _graphs_section(graphs)),
        ("passes", "Passes", _passes_section(report)
         + (f'<figure class="plot">{_nodes_chart(report)}<figcaption>Nodes after each pass that changed the '
            "node count.</figcaption></figure>" if _nodes_chart(report) else "")),
        ("near-misses", "Near misses", _near_section(report, graphs)),
        ("inputs", "Inputs", _inputs(report)),
        ("verification", "Verification", _verify_section(report)),
    ]
    if report.get("bisect"):
        sections.append(("bisection", "Which pass broke the numbers (bisection)", _bisect_section(report["bisect"])))
    if report.get("compare"):
        sections.append(("per-tensor", "Per-tensor comparison", _compare_section(report["compare"])))
    if report.get("bench"):
        sections.append(("benchmark", "Benchmark", _bench_section(report["bench"])))
    sections.append(("environment", "Environment", _environment_section(report.get("environment") or {})))
    nav = "".join(f'<a href="#{i}">{_e(t.split(":")[0].split(" (")[0])}</a>' for i, t, _ in sections)
    body = "".join(_section(i, t, b) for i, t, b in sections)
    # "<", ">" and "&" only occur inside JSON strings: as \u escapes the text can never end or
    # re-open the script element (rule 4), and JSON.parse / json.loads read the same values.
    data = to_json(report).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    version = ((report.get("environment") or {}).get("packages") or {}).get("fusionviz", "")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>fusionviz report: {_e(name)}</title><style>{CSS}</style></head><body>"
            f"<header><h1>fusionviz report: {_e(name)}</h1>"
            f'<div class="muted">What the passes did to the model, whether the outputs stayed equal, and how to '
            f"reproduce it.</div></header><nav>{nav}</nav><main>{body}</main>"
            f"<footer>Made by fusionviz {_e(version)}; this file is self-contained and opens offline. The report's "
            "data is embedded as JSON (element <code>#fusionviz-report</code>).</footer>"
            f'<script type="application/json" id="fusionviz-report">{data}</script>'
            f"<script>{JS}</script></body></html>\n")
