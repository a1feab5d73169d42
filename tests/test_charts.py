"""Charts are pure functions that return figures with the expected traces."""

from __future__ import annotations

import onnx.parser
import plotly.graph_objects as go
import pytest

from fusionviz import charts
from fusionviz.analysis import memory_plan
from fusionviz.bench import BenchResult, Settings, compute_stats


def _res(label, samples, **mem):
    return BenchResult(label, (), Settings(), compute_stats(samples),
                       {"rss_session_mb": 5.0, "rss_run_mb": 6.0, "arena_held_mb": None,
                        "static_peak_reuse_bytes": 2 * 1024 * 1024, **mem}, samples_ms=tuple(samples))


def test_latency_box_one_box_per_successful_variant_with_median_label():
    failed = BenchResult("broken", (), Settings(), None, {}, error="timed out after 1 s")
    fig = charts.latency_box([_res("A", [1.0, 2.0, 3.0]), _res("B", [2.0, 2.0, 2.0]), failed])
    assert isinstance(fig, go.Figure)
    assert [t.type for t in fig.data] == ["box", "box"]
    assert [t.name for t in fig.data] == ["A", "B"]
    assert [a.text for a in fig.layout.annotations] == ["2.000 ms ⚠", "2.000 ms"]
    assert "broken" in fig.layout.title.text


def test_memory_bars_skip_missing_series():
    fig = charts.memory_bars([_res("A", [1.0]), _res("B", [1.0], static_peak_reuse_bytes=1024 * 1024)])
    names = [t.name for t in fig.data]
    assert names == ["RSS: session creation", "RSS: runs", "static peak (reuse)"]
    assert list(fig.data[2].y) == [2.0, 1.0]


def test_waterfall_has_latency_and_memory_rows():
    steps = [{"label": "original", "median_ms": 10.0, "static_sum_bytes": 4 * 1024 * 1024},
             {"label": "+fold", "delta_ms": -2.0, "delta_static_sum_bytes": -1024 * 1024}]
    fig = charts.waterfall(steps)
    assert [t.type for t in fig.data] == ["waterfall", "waterfall"]
    assert list(fig.data[0].y) == [10.0, -2.0, 8.0]
    assert list(fig.data[1].y) == [4.0, -1.0, 3.0]
    assert list(fig.data[0].measure) == ["absolute", "relative", "total"]


def test_optype_time_bars_stack_one_trace_per_op():
    fig = charts.optype_time_bars({"Conv": 4.0, "BatchNormalization": 1.0}, {"by_op_type": {"Conv": 3.5}})
    assert [t.name for t in fig.data] == ["Conv", "BatchNormalization"]
    assert list(fig.data[1].y) == [1.0, 0.0]
    assert fig.layout.barmode == "stack"
    assert len(charts.optype_time_bars(None, None).data) == 0


def test_lifetime_gantt_from_a_plan():
    plan = memory_plan(onnx.parser.parse_model('<ir_version: 8, opset_import: ["" : 17]>'
                                               "g (float[1,1000] x) => (float[1,1000] y) { a = Relu(x) b = Sigmoid(a) y = Tanh(b) }"))
    fig = charts.lifetime_gantt(plan)
    assert [t.type for t in fig.data] == ["scatter", "bar"]
    assert list(fig.data[1].y) == ["a", "b", "y"]
    assert list(fig.data[1].x) == [2, 2, 1]  # lifetimes in steps


def test_speed_vs_error_scatter():
    fig = charts.speed_vs_error([{"label": "fp32", "median_ms": 5.0, "max_rel_diff": 0.0},
                                 {"label": "fp16", "median_ms": 3.0, "max_rel_diff": 1e-3}])
    assert [t.type for t in fig.data] == ["scatter"]
    assert list(fig.data[0].text) == ["fp32", "fp16"]


def _steps():
    from fusionviz.bench import BenchResult, Settings, compute_stats
    from fusionviz.experiment.variant import Role

    def res(label, rounds, role, passes=(), static=1000):
        return BenchResult(label, passes, Settings(), compute_stats(list(rounds)),
                           {"static_sum_intermediate_bytes": static}, round_medians_ms=tuple(rounds), role=role)

    drift = [1.0, 1.5, 2.0, 1.2, 1.8, 1.1, 1.6, 1.3]
    return [res("original", [10 * d for d in drift], Role("original")),
            res("+a", [8 * d for d in drift], Role("step", "a"), ("a",), 600),
            res("+b", [8 * d * f for d, f in zip(drift, [1.02, 0.97, 1.01, 0.99, 1.03, 0.98, 1.0, 1.0],
                                                   strict=True)], Role("step", "b"), ("a", "b"), 600)]


def test_the_what_if_chart_and_its_table_say_the_same_from_the_same_effects():
    from fusionviz.bench import whatif

    results = _steps()
    effects, _ = whatif.cumulative_effects(results)
    fig = charts.effect_bars(effects, "t", "x")
    rows = whatif.effects_table(effects, results)
    labels = [a.text for a in fig.layout.annotations]
    assert labels == [r["claim"] for r in rows] == ["1.25× faster (20% less time)", "no measurable difference"]
    bars = list(fig.data[0].x)
    for bar, row, e in zip(bars, rows, effects, strict=True):
        assert bar == pytest.approx(100 * (e.ratio - 1))
        assert row["ratio [95% interval]"] == e.interval() and row["vs"] == e.baseline
    assert rows[0]["Δ static intermediates (bytes)"] == -400 and rows[1]["Δ static intermediates (bytes)"] == 0
    # Hovering a bar gives its ratio and interval; "faster" is never said of a bar within noise.
    assert "faster" not in fig.data[0].hovertext[1] and "95% interval" in fig.data[0].hovertext[1]


def test_op_histogram_labels_every_op():
    from fusionviz.charts import HIST_BAR_PX, op_histogram

    counts = {f"Op{i:02d}": 100 - i for i in range(30)}
    fig = op_histogram(counts)
    ops = list(fig.data[0].y)
    assert len(ops) == 25 and ops[-1] == "Op00"  # the 25 most frequent, the largest on top
    assert list(fig.layout.yaxis.tickvals) == ops and list(fig.layout.yaxis.ticktext) == ops
    assert fig.layout.height >= HIST_BAR_PX * 25 >= 16 * 25  # room for every label
