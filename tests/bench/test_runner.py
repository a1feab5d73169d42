"""Real (short) benchmarks of tiny models in worker processes; failures stay per variant."""

from __future__ import annotations

import threading

import onnx
import psutil
import pytest

from fusionviz import errors
from fusionviz.bench import BenchCancelled, Settings, Variant, run_benchmark
from fusionviz.bench.manager import machine_lock
from fusionviz.bench.schedule import MIN_ROUNDS


def _no_children_left():
    return [p for p in psutil.Process().children(recursive=True) if p.is_running()
            and p.status() != psutil.STATUS_ZOMBIE]


def test_two_tiny_variants_return_stats_memory_and_verification(tiny, tiny_fused):
    msgs = []
    res = run_benchmark([Variant("A", tiny), Variant("B", tiny_fused, Settings(level="all"))],
                        min_time_s=0.1, warmup=2, verify_against=tiny,
                        progress=lambda f, m: msgs.append((f, m)))
    assert [r.label for r in res] == ["A", "B"]
    for r in res:
        assert r.error is None, r.error
        assert r.stats is not None and r.stats.n == len(r.samples_ms) >= MIN_ROUNDS
        assert 0 < r.stats.median_ms < 50
        assert len(r.round_medians_ms) >= MIN_ROUNDS
        assert sum(r.samples_ms) >= 100.0  # min_time_s of timed runs
        assert r.verify["ok"] is True
        m = r.memory
        assert m["baseline_rss_mb"] > 10 and m["rss_session_mb"] >= 0 and m["rss_run_mb"] >= 0
        assert m["static_sum_intermediate_bytes"] == (2 * 64 * 4 if r.label == "A" else 3 * 64 * 4)
        assert r.as_dict()["latency"]["median_ms"] == r.stats.median_ms
    assert res[1].settings.level == "all"
    # Interleaved, with a rotating start: round 1 A then B, round 2 B then A.
    rounds = [m for _, m in msgs if m.startswith("round")]
    assert rounds[:4] == ["round 1: 'A'", "round 1: 'B'", "round 2: 'B'", "round 2: 'A'"]
    fracs = [f for f, _ in msgs]
    assert fracs == sorted(fracs) and fracs[-1] == 1.0
    assert not _no_children_left()


def test_killed_and_failing_workers_give_per_variant_errors(tiny, hog, hang, rejected):
    res = run_benchmark(
        [Variant("ok", tiny), Variant("hog", hog), Variant("hang", hang), Variant("bad", rejected)],
        min_time_s=0.05, timeout_s=3, mem_limit_mb=1024,
    )
    by = {r.label: r for r in res}
    assert by["ok"].error is None and by["ok"].stats is not None
    assert by["hog"].error == "exceeded the 1024 MB memory cap (bench --mem-limit MB raises it)"
    assert by["hang"].error == "timed out after 3 s"
    assert by["bad"].error.startswith("onnxruntime failed:")
    assert "custom.x" in by["bad"].error and "fusionviz-bench-" not in by["bad"].error
    for label in ("hog", "hang", "bad"):
        assert by[label].stats is None
    assert not _no_children_left()


def test_profile_aggregates_by_op_type_and_node_with_arena_figures(tiny):
    (r,) = run_benchmark([Variant("A", tiny)], min_time_s=0.05, profile=True)
    assert set(r.profile["by_op_type"]) == {"Relu", "Sigmoid", "Add"}
    assert len(r.profile["by_node"]) == 3
    assert all(v >= 0 for v in r.profile["by_op_type"].values())
    assert r.memory["arena_held_mb"] is not None and r.memory["arena_held_mb"] > 0


def test_without_profile_no_profile_dict(tiny):
    (r,) = run_benchmark([Variant("A", tiny)], min_time_s=0.05)
    assert r.profile is None and r.verify is None


def test_cancel_stops_the_run_and_leaves_no_workers(tiny):
    ev = threading.Event()
    ev.set()
    with pytest.raises(BenchCancelled):
        run_benchmark([Variant("A", tiny)], min_time_s=0.05, cancel=ev)
    assert not _no_children_left()


def test_lock_makes_a_second_benchmark_wait_and_say_so(tmp_path):
    path = tmp_path / "lock"
    msgs = []
    ev = threading.Event()
    with machine_lock(path=path):
        t = threading.Thread(target=lambda: _try_lock(path, msgs, ev))
        t.start()
        t.join(timeout=0.6)
        assert msgs == [(0.0, "waiting for another benchmark to finish")]
        ev.set()
        t.join(timeout=5)
    assert msgs[-1] == "cancelled"


def _try_lock(path, msgs, ev):
    try:
        with machine_lock(lambda f, m: msgs.append((f, m)), ev, path=path):
            msgs.append("got it")
    except BenchCancelled:
        msgs.append("cancelled")


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda m: [Variant("A", m), Variant("A", m)], id="duplicate-labels"),
        pytest.param(lambda m: [], id="no-variants"),
        pytest.param(lambda m: [Variant("A", m, Settings(provider="NoSuchExecutionProvider"))], id="provider"),
    ],
)
def test_bad_requests_raise_input_errors(tiny, make):
    with pytest.raises(errors.InputSpecError):
        run_benchmark(make(tiny), min_time_s=0.05)


def test_bad_settings_raise_input_errors():
    with pytest.raises(errors.InputSpecError):
        Settings(level="turbo")
    with pytest.raises(errors.InputSpecError):
        Settings(threads=0)


def test_verification_uses_the_combined_test_near_zero_equal_new_nan_not():
    """A near-zero output (a detector's probability map on noise) that moves by 1e-12 is equal
    (max relative error alone called it 1e-3 off); a variant that makes NaN is not."""
    from tests.bench.conftest import parse

    def model(body: str) -> onnx.ModelProto:
        return parse(f"""
            <ir_version: 8, opset_import: ["" : 17]>
            g (float[8] x) => (float[8] y) {{
                {body}
            }}""")

    ref = model("s = Constant <value = float {1e-9}> ()\n y = Mul(x, s)")
    moved = model("s = Constant <value = float {1.001e-9}> ()\n y = Mul(x, s)")
    nan = model("s = Constant <value = float {1e-9}> ()\n z = Mul(x, s)\n q = Sqrt(x)\n n = Sub(q, q)\n y = Add(z, n)")
    res = run_benchmark([Variant("moved", moved), Variant("nan", nan)], min_time_s=0.02, warmup=1,
                        verify_against=ref, shapes={"x": [8]})
    by = {r.label: r for r in res}
    assert by["moved"].verify["ok"] is True, by["moved"].verify
    assert by["nan"].verify["ok"] is False
