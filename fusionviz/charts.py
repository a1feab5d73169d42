"""Plotly figures: pure functions from results to ``plotly.graph_objects.Figure``.

No Streamlit here. Inputs are the backend's records (``BenchResult``, ``MemoryPlan``)
or plain dicts, so pages, reports and tests can all call them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

logger = logging.getLogger(__name__)

_MB = 1024 * 1024
_COLORS = ("#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#FF9DA6", "#9D755D",
           "#BAB0AC", "#EECA3B")


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _empty(title: str, message: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title=title, xaxis={"visible": False}, yaxis={"visible": False},
                      annotations=[{"text": message, "showarrow": False, "font": {"size": 14}}])
    return fig


def latency_box(results: Sequence[Any], *, title: str = "Latency per variant") -> go.Figure:
    """One box per variant (every timed run), median labelled; failed variants noted in the title.

    Args:
        results: ``BenchResult`` objects (or dicts with ``label``, ``samples_ms``, ``stats``).

    Returns:
        A figure with one ``Box`` trace per successful variant.
    """
    fig = go.Figure()
    failed = []
    for i, r in enumerate(results):
        label = _get(r, "label")
        stats = _get(r, "stats")
        samples = list(_get(r, "samples_ms", ()) or ())
        if stats is None or not samples:
            failed.append(label)
            continue
        med = _get(stats, "median_ms")
        unstable = _get(stats, "unstable", False)
        # Precomputed box: whiskers at p5/p95 so a few scheduler hiccups (10-100x the median on a
        # shared machine) cannot squash every box into a line at the bottom of the axis.
        p5, q1, q2, q3, p95 = np.percentile(np.asarray(samples, dtype=float), [5, 25, 50, 75, 95])
        fig.add_trace(go.Box(x=[label], q1=[q1], median=[q2], q3=[q3], lowerfence=[p5], upperfence=[p95],
                             name=label, marker_color=_COLORS[i % len(_COLORS)]))
        fig.add_annotation(x=label, y=med, text=f"{med:.3f} ms" + (" ⚠" if unstable else ""),
                           showarrow=False, yshift=12, font={"size": 11})
    if failed:
        title += " (failed: " + ", ".join(str(f) for f in failed) + ")"
    fig.update_layout(title=title, yaxis_title="latency per inference (ms); box p25–p75, whiskers p5–p95",
                      showlegend=False)
    return fig


def memory_bars(results: Sequence[Any], *, title: str = "Memory per variant") -> go.Figure:
    """Grouped bars per variant: RSS (session, run), arena, static peak with and without reuse (MB).

    Args:
        results: ``BenchResult`` objects (or dicts with a ``memory`` dict).

    Returns:
        A figure with one ``Bar`` trace per memory figure that any variant has.
    """
    series = (
        ("rss_session_mb", "RSS: session creation", 1.0),
        ("rss_run_mb", "RSS: runs", 1.0),
        ("arena_held_mb", "ORT arena held", 1.0),
        ("static_peak_reuse_bytes", "static peak (reuse)", 1 / _MB),
        ("static_peak_no_reuse_bytes", "static peak (no reuse)", 1 / _MB),
    )
    labels = [_get(r, "label") for r in results]
    fig = go.Figure()
    for i, (key, name, scale) in enumerate(series):
        vals = []
        for r in results:
            v = (_get(r, "memory") or {}).get(key)
            vals.append(v * scale if v is not None else None)
        if all(v is None for v in vals):
            continue
        fig.add_trace(go.Bar(name=name, x=labels, y=vals, marker_color=_COLORS[i % len(_COLORS)],
                             texttemplate="%{y:.1f}", textposition="outside"))
    fig.update_layout(title=title, barmode="group", yaxis_title="MB")
    return fig


def waterfall(steps: Sequence[Mapping[str, Any]], *, title: str = "Effect of each pass") -> go.Figure:
    """Per-pass waterfall of latency and static-memory deltas (two rows).

    Args:
        steps: :func:`fusionviz.bench.whatif.cumulative_steps` output: the first is the baseline
            (``median_ms``, ``static_sum_bytes``), each later one has ``delta_ms`` and
            ``delta_static_sum_bytes``.

    Returns:
        A figure with a latency ``Waterfall`` and a memory ``Waterfall``.
    """
    if not steps:
        return _empty(title, "no steps")
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("latency (ms)", "static intermediate tensors (MB)"))
    labels = [str(s.get("label")) for s in steps]
    base = steps[0]
    lat = [base.get("median_ms") or 0.0] + [s.get("delta_ms") or 0.0 for s in steps[1:]]
    mem0 = (base.get("static_sum_bytes") or 0) / _MB
    mem = [mem0] + [(s.get("delta_static_sum_bytes") or 0) / _MB for s in steps[1:]]
    measure = ["absolute"] + ["relative"] * (len(steps) - 1)
    total_lat = sum(lat)
    total_mem = sum(mem)
    fig.add_trace(go.Waterfall(x=labels + ["result"], y=lat + [total_lat], measure=measure + ["total"],
                               name="latency", texttemplate="%{delta:+.3f}",
                               decreasing={"marker": {"color": "#54A24B"}},
                               increasing={"marker": {"color": "#E45756"}}), row=1, col=1)
    fig.add_trace(go.Waterfall(x=labels + ["result"], y=mem + [total_mem], measure=measure + ["total"],
                               name="memory", texttemplate="%{delta:+.2f}",
                               decreasing={"marker": {"color": "#54A24B"}},
                               increasing={"marker": {"color": "#E45756"}}), row=2, col=1)
    fig.update_layout(title=title, showlegend=False)
    return fig


def optype_time_bars(before: Mapping[str, float] | Any, after: Mapping[str, float] | Any, *,
                     labels: tuple[str, str] = ("before", "after"),
                     title: str = "Where time goes (onnxruntime profiler)") -> go.Figure:
    """Stacked bars of milliseconds per op type, before vs after.

    Args:
        before: ``{op_type: ms}``, or a profile dict / ``BenchResult`` with ``by_op_type``.
        after: the same for the other variant.

    Returns:
        A stacked bar figure with one ``Bar`` trace per op type (two bars: before, after).
    """
    def ops(x: Any) -> dict[str, float]:
        if x is None:
            return {}
        prof = _get(x, "profile") if not isinstance(x, Mapping) else None
        if prof:
            x = prof
        if isinstance(x, Mapping) and "by_op_type" in x:
            x = x["by_op_type"]
        return {str(k): float(v) for k, v in dict(x or {}).items()}

    a, b = ops(before), ops(after)
    if not a and not b:
        return _empty(title, "no profile: run the benchmark with profiling on")
    names = sorted(set(a) | set(b), key=lambda k: -(a.get(k, 0.0) + b.get(k, 0.0)))
    fig = go.Figure()
    for i, op in enumerate(names):
        fig.add_trace(go.Bar(name=op, x=list(labels), y=[a.get(op, 0.0), b.get(op, 0.0)],
                             marker_color=_COLORS[i % len(_COLORS)],
                             hovertemplate=f"{op}: %{{y:.3f}} ms<extra></extra>"))
    fig.update_layout(title=title, barmode="stack", yaxis_title="ms per inference")
    return fig


def lifetime_gantt(plan: Any, *, max_tensors: int = 300,
                   title: str = "Tensor lifetimes (static memory plan)") -> go.Figure:
    """Gantt-style chart: one bar per activation from producing step to last use; live bytes above.

    Args:
        plan: a :class:`fusionviz.analysis.MemoryPlan` (or its ``as_dict(tensors=True)``).
        max_tensors: draw at most this many bars (the largest tensors); the live-bytes line is
            always complete.

    Returns:
        A two-row figure: live MB per step (``Scatter``) and the lifetime bars (``Bar``, horizontal).
    """
    tensors = list(_get(plan, "tensors", ()) or ())
    live = list(_get(plan, "live_bytes", ()) or ())
    if not tensors:
        return _empty(title, "no intermediate tensors")
    shown = sorted(tensors, key=lambda t: -int(_get(t, "bytes", 0)))[:max_tensors]
    shown.sort(key=lambda t: (int(_get(t, "start")), str(_get(t, "name"))))
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.25, 0.75], vertical_spacing=0.04)
    fig.add_trace(go.Scatter(x=list(range(len(live))), y=[v / _MB for v in live], mode="lines",
                             line={"shape": "hv"}, name="live MB (reuse)",
                             hovertemplate="step %{x}: %{y:.2f} MB live<extra></extra>"), row=1, col=1)
    names = [str(_get(t, "name")) for t in shown]
    starts = [int(_get(t, "start")) for t in shown]
    spans = [int(_get(t, "end")) - int(_get(t, "start")) + 1 for t in shown]
    mbs = [int(_get(t, "bytes", 0)) / _MB for t in shown]
    fig.add_trace(go.Bar(y=names, x=spans, base=[s - 0.5 for s in starts], orientation="h",
                         marker={"color": mbs, "colorscale": "Viridis", "showscale": True,
                                 "colorbar": {"title": "MB", "len": 0.7, "y": 0.35}},
                         customdata=[[m, _get(t, "op_type", "")] for m, t in zip(mbs, shown, strict=False)],
                         hovertemplate="%{y}<br>%{customdata[1]}, %{customdata[0]:.3f} MB<br>"
                                       "steps %{base:.0f}+%{x}<extra></extra>",
                         name="lifetimes"), row=2, col=1)
    fig.update_yaxes(title_text="MB live", row=1, col=1)
    fig.update_yaxes(autorange="reversed", showticklabels=len(shown) <= 60, row=2, col=1)
    fig.update_xaxes(title_text="execution step", row=2, col=1)
    fig.update_layout(title=title, showlegend=False, height=max(400, min(1600, 120 + 14 * len(shown))))
    return fig


def speed_vs_error(points: Sequence[Mapping[str, Any]], *,
                   title: str = "Speed vs accuracy") -> go.Figure:
    """Scatter of latency against output error (precision passes, references).

    Args:
        points: dicts with ``label``, ``median_ms`` and ``max_rel_diff`` (or ``error``).

    Returns:
        A figure with one ``Scatter`` trace (log-scaled error axis).
    """
    pts = [p for p in points if p.get("median_ms") is not None]
    if not pts:
        return _empty(title, "no measured points")
    err = [max(float(p.get("max_rel_diff", p.get("error", 0.0)) or 0.0), 1e-12) for p in pts]
    fig = go.Figure(go.Scatter(x=[p["median_ms"] for p in pts], y=err, mode="markers+text",
                               text=[str(p.get("label", "")) for p in pts], textposition="top center",
                               marker={"size": 10}))
    fig.update_layout(title=title, xaxis_title="median latency (ms)",
                      yaxis_title="max relative error (log)", yaxis_type="log")
    return fig


def effect_bars(effects: Sequence[Any], title: str, axis: str, *, better: str = "lower") -> go.Figure:
    """Horizontal bars of time changes (paired ratio − 1, in percent) with their 95% intervals.

    Each bar is labelled with the words :func:`fusionviz.bench.claims.speed_claim` gives its
    ratio (``1.3× slower (30% more time)``, ``no measurable difference``), the same words as the
    table beside it and the ``bench`` command; hovering shows the ratio and its interval.

    Args:
        effects: :class:`fusionviz.bench.whatif.Effect` records.
        title: the chart title (names the run's onnxruntime level).
        axis: the x axis title.
        better: ``"lower"`` when less time is good (a faster variant), ``"higher"`` when more
            time is (leave-one-out: the result is slower without a pass that helps).

    Returns:
        A plotly figure; bars whose interval holds 1 are grey.
    """
    names, pct, plus, minus, colors, text, hover = [], [], [], [], [], [], []
    for e in effects:
        names.append(e.name)
        p = e.pct or 0.0
        pct.append(p)
        lo = 100 * (e.ci_low - 1) if e.ci_low is not None else p
        hi = 100 * (e.ci_high - 1) if e.ci_high is not None else p
        plus.append(max(hi - p, 0.0))
        minus.append(max(p - lo, 0.0))
        good = (p < 0) if better == "lower" else (p > 0)
        colors.append("#9e9e9e" if e.ratio is None or e.within_noise else ("#2e9d4f" if good else "#d64545"))
        text.append(e.claim(with_figures=False))
        hover.append(e.claim())
    fig = go.Figure(go.Bar(y=names, x=pct, orientation="h", marker_color=colors, hovertext=hover,
                           hoverinfo="y+text",
                           error_x={"type": "data", "symmetric": False, "array": plus, "arrayminus": minus,
                                    "color": "#444", "thickness": 1.2}))
    # Each bar's words in a column right of the plot, clear of the error bars.
    for name, label, color in zip(names, text, colors, strict=True):
        fig.add_annotation(x=1.01, xref="paper", y=name, yref="y", xanchor="left", showarrow=False,
                           text=label, font={"color": "#666" if color == "#9e9e9e" else "#222", "size": 12})
    span = max([abs(p) + max(a, b) for p, a, b in zip(pct, plus, minus, strict=True)] or [1.0])
    fig.update_layout(title=title, xaxis_title=axis, height=150 + 40 * max(len(effects), 1),
                      margin={"l": 10, "r": 260, "t": 60, "b": 50}, showlegend=False)
    fig.update_xaxes(range=[-1.15 * span, 1.15 * span], zeroline=True, zerolinewidth=2, zerolinecolor="#333")
    fig.update_yaxes(autorange="reversed")
    return fig


#: Pixels per bar of :func:`op_histogram`: room for every op's label at the default font.
HIST_BAR_PX = 22


def op_histogram(counts: Mapping[str, int], *, top: int = 25, title: str = "") -> go.Figure:
    """Horizontal bars of node counts per op type, most frequent first, every bar labelled.

    A categorical axis thins its labels when they are crowded (a 25-op histogram 320 px high
    labelled every other op), so every op is a tick of its own and the figure grows with the
    number of bars (``HIST_BAR_PX`` each).
    """
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    if not items:
        return _empty(title or "Op histogram", "No nodes.")
    ops = [op for op, _ in items][::-1]  # the largest on top
    values = [int(n) for _, n in items][::-1]
    fig = go.Figure(go.Bar(x=values, y=ops, orientation="h", marker_color=_COLORS[0],
                           text=[f"{v:,}" for v in values], textposition="outside", cliponaxis=False,
                           hovertemplate="%{y}: %{x:,} nodes<extra></extra>"))
    fig.update_layout(title=title or None, height=max(160, HIST_BAR_PX * len(ops) + 60),
                      margin={"l": 10, "r": 40, "t": 30 if title else 10, "b": 30}, showlegend=False,
                      xaxis_title="nodes", bargap=0.25)
    fig.update_yaxes(type="category", tickmode="array", tickvals=ops, ticktext=ops, automargin=True)
    return fig
