"""Benchmarks from two sessions at once are queued by the machine-wide lock, never overlapped,
and each gets its own correct results."""

from __future__ import annotations

import threading
import time

import onnx.parser

from fusionviz.bench import Variant, run_benchmark

RELU = """
<ir_version: 10, opset_import: ["" : 18]>
g (float[1,64] x) => (float[1,64] y) { y = Relu(x) }"""
TWO = """
<ir_version: 10, opset_import: ["" : 18]>
g (float[1,64] x) => (float[1,64] y) { a = Relu(x)\n y = Neg(a) }"""


def test_two_concurrent_benchmarks_are_serialised_and_keep_their_results(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # a private lock file for this test
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    events: dict[str, list[tuple[float, str]]] = {"A": [], "B": []}
    results: dict[str, list] = {}

    def job(key: str, text: str) -> None:
        model = onnx.parser.parse_model(text)
        results[key] = run_benchmark(
            [Variant(f"{key}-model", model)], min_time_s=0.3, warmup=1,
            progress=lambda f, m, k=key: events[k].append((time.monotonic(), m)))

    threads = [threading.Thread(target=job, args=("A", RELU)), threading.Thread(target=job, args=("B", TWO))]
    for t in threads:
        t.start()
        time.sleep(0.05)
    for t in threads:
        t.join(timeout=180)
    assert set(results) == {"A", "B"}
    for key, nodes in (("A", 1), ("B", 2)):
        (r,) = results[key]
        assert r.error is None and r.label == f"{key}-model" and r.stats.n > 0
        # The static plan is this session's own model (1 vs 2 nodes -> 0 vs 256 intermediate bytes).
        assert r.memory["static_sum_intermediate_bytes"] == (nodes - 1) * 64 * 4
    waited = [k for k, ev in events.items() if any("waiting for another benchmark" in m for _, m in ev)]
    assert len(waited) == 1, events
    first, second = ("B", "A") if waited == ["A"] else ("A", "B")
    timed = lambda ev: [t for t, m in ev if m.startswith("round")]  # noqa: E731
    assert max(timed(events[first])) < min(timed(events[second])), "timings overlapped"
