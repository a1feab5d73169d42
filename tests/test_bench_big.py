"""benchmarks/bench_big.py without torch and without big files: goals, table, the synthetic model's
writer (small), argv per tool and the process-tree measurement."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_big", ROOT / "benchmarks" / "bench_big.py")
bb = importlib.util.module_from_spec(_spec)
sys.modules["bench_big"] = bb  # dataclasses look their module up
_spec.loader.exec_module(bb)
GB = bb.GB


def _row(tool, rc=0, wall=1.0, rss=0.5 * GB, **kw):
    return {"model": "m", "tool": tool, "rc": rc, "wall_s": wall, "peak_rss": int(rss), "nodes_before": 10,
            "nodes_after": kw.pop("nodes_after", None), "bytes": GB, "external": True, **kw}


def _good_rows(size):
    ok = {"valid": True, "equal": True, "reopen": True}
    return [_row("fv_info", wall=2.0, rss=0.4 * size),
            _row("onnxslim", wall=20.0, rss=3 * size, **ok),
            _row("fv_optimize", wall=30.0, rss=1.5 * size, nodes_after=8, **ok),
            _row("fv_optimize_nv", wall=10.0, rss=1.2 * size, nodes_after=8, **ok),
            _row("fv_render", wall=4.0, rss=0.4 * size),
            _row("app_load", wall=3.0, rss=0.5 * size),
            _row("app_graph", wall=4.0, rss=1.8 * size),
            _row("app_toggle_off", wall=3.0, rss=2.0 * size),
            _row("app_toggle_on", wall=1.0, rss=2.0 * size)]


def test_goal_limits_follow_the_issue_formulas():
    size = 2 * GB
    ext = bb.goal_limits(size, external=True)
    one = bb.goal_limits(size, external=False)
    assert ext["fv_optimize"] == one["fv_optimize"] == 5 * GB
    assert ext["fv_info"] == ext["fv_render"] == int(1.5 * GB)
    assert one["fv_info"] == one["fv_render"] == int(2.9 * GB)


def test_all_goals_met():
    goals = bb.judge_goals(_good_rows(GB), GB, external=True)
    assert goals and all(v is True for v in goals.values()), goals


@pytest.mark.parametrize("change, goal", [
    (("fv_optimize", "peak_rss", 3.5 * GB), "rss optimize"),
    (("fv_info", "peak_rss", 1.2 * GB), "rss info"),
    (("fv_render", "peak_rss", 1.2 * GB), "rss render"),
    (("fv_info", "wall_s", 6.0), "info time"),
    (("fv_optimize_nv", "wall_s", 25.0), "no-verify vs onnxslim"),
    (("fv_render", "rc", 1), "exit 0"),
    (("fv_optimize", "equal", False), "output valid+equal+reopens"),
    (("fv_optimize_nv", "reopen", False), "output valid+equal+reopens"),
    (("fv_optimize", "valid", None), "output valid+equal+reopens"),
    (("app_graph", "wall_s", 5.5), "app first graph"),
    (("app_graph", "peak_rss", 3.5 * GB), "app memory"),
    (("app_toggle_on", "wall_s", 2.5), "app toggle again"),
    (("app_toggle_off", "peak_rss", 3.5 * GB), "app memory"),
    (("app_toggle_on", "rc", 1), "app toggle again"),
])
def test_each_goal_can_fail(change, goal):
    rows = _good_rows(GB)
    tool, key, value = change
    next(r for r in rows if r["tool"] == tool)[key] = value
    goals = bb.judge_goals(rows, GB, external=True)
    assert goals[goal] is False, goals
    also = {"exit 0": {"rss render"}}.get(goal, set())  # a failed render meets no ceiling either
    assert {k for k, v in goals.items() if v is not True} == {goal} | also, goals


def test_one_file_models_get_the_looser_info_ceiling():
    rows = _good_rows(GB)
    next(r for r in rows if r["tool"] == "fv_info")["peak_rss"] = int(1.5 * GB)
    assert bb.judge_goals(rows, GB, external=True)["rss info"] is False
    assert bb.judge_goals(rows, GB, external=False)["rss info"] is True


def test_goals_not_measurable_are_none():
    rows = [r for r in _good_rows(GB) if r["tool"] != "onnxslim"]
    assert bb.judge_goals(rows, GB, external=True)["no-verify vs onnxslim"] is None
    rows = _good_rows(GB)
    next(r for r in rows if r["tool"] == "onnxslim")["rc"] = 1
    assert bb.judge_goals(rows, GB, external=True)["no-verify vs onnxslim"] is None
    goals = bb.judge_goals([], GB, external=True)
    assert set(goals.values()) == {None}
    goals = bb.judge_goals([r for r in _good_rows(GB) if not r["tool"].startswith("app_")], GB, external=True)
    assert goals["app first graph"] is None and goals["app memory"] is None  # --app not asked for
    assert goals["app toggle again"] is None
    goals = bb.judge_goals([r for r in _good_rows(GB) if not r["tool"].startswith("app_toggle")], GB, external=True)
    assert goals["app toggle again"] is None and goals["app first graph"] is True  # no toggle test
    rows = _good_rows(GB)
    next(r for r in rows if r["tool"] == "app_graph")["rc"] = 1  # the browser run failed
    goals = bb.judge_goals(rows, GB, external=True)
    assert goals["app first graph"] is False and goals["app memory"] is False


def test_table_rows_and_format():
    rows = _good_rows(GB)
    rows.append(_row("ort", rc=None, wall=9.0, rss=13 * GB, killed="killed: process tree over 12.0 GB"))
    cells = bb.table_rows(rows)
    assert len(cells) == len(rows) and all(len(c) == len(bb.HEADER) for c in cells)
    opt = cells[2]
    col = {h: i for i, h in enumerate(bb.HEADER)}
    assert opt[1] == "fusionviz optimize --all" and opt[2] == "ok" and opt[col["nodes"]] == "10 -> 8"
    assert opt[col["x size"]] == "1.5x" and opt[col["goal GB"]] == "3.00"  # 2 x 1 GB + 1 GB
    assert cells[0][col["goal GB"]] == "1.00"  # info, external data: 0.5 x 1 GB + 0.5 GB
    assert cells[1][col["goal GB"]] == ""  # onnxslim: no goal of its own
    assert [opt[col[k]] for k in ("valid", "equal", "reopen")] == ["yes", "yes", "yes"]
    assert [cells[0][col[k]] for k in ("valid", "equal", "reopen")] == ["", "", ""]  # info writes no model
    assert cells[-1][2] == "killed: process tree over 12.0 GB" and cells[-1][col["peak GB"]] == "13.00"
    text = bb.format_table(cells)
    lines = text.splitlines()
    assert len(lines) == len(rows) + 2 and len({len(x) for x in lines}) == 1
    g = bb.goals_table({"m": {"bytes": GB, "external": True, "goals": bb.judge_goals(rows[:-1], GB, True)}})
    assert "| m " in g and "external" in g and "NO" not in g


def test_synthetic_model_is_valid_external_and_runs(tmp_path):
    import onnxruntime as ort

    path = bb.write_synthetic(tmp_path / "s" / "s.onnx", total_bytes=3 * 64 * 64 * 4, dim=64, seed=1)
    graph = onnx.load(str(path), load_external_data=False)
    assert len(graph.graph.initializer) == 6  # three layers of weight + bias
    assert all(t.data_location == onnx.TensorProto.EXTERNAL for t in graph.graph.initializer)
    assert bb.model_bytes(path) > 3 * 64 * 64 * 4 and bb.nodes_of(path) == 10
    onnx.checker.check_model(str(path))
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((1, 5, 64), dtype=np.float32)
    y = sess.run(None, {"x": x})[0]
    full = onnx.load(str(path))
    w = {t.name: onnx.numpy_helper.to_array(t) for t in full.graph.initializer}
    want = x
    for i in range(3):
        want = np.maximum(want @ w[f"w{i}"] + w[f"b{i}"], 0)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
    assert 0.1 < float(np.std(y)) < 10  # the scaling keeps activations in range


def test_argv_per_tool(tmp_path):
    m = tmp_path / "m.onnx"
    argv, out = bb.command("fv_optimize_nv", m, tmp_path, external=False)
    assert argv[1:5] == ["-m", "fusionviz", "optimize", str(m)] and "--all" in argv and "--no-verify" in argv
    assert out == tmp_path / "fv_optimize_nv.onnx"
    argv, out = bb.command("fv_render", m, tmp_path, external=True)
    assert "--collapse" in argv and out is None
    argv, _ = bb.command("onnxslim", m, tmp_path, external=True)
    assert argv[-1] == "--save-as-external-data"
    argv, _ = bb.command("ort", m, tmp_path, external=True)
    assert argv[2:4] == ["--tool", "ort"] and argv[-1] == "--external"
    with pytest.raises(ValueError):
        bb.command("nope", m, tmp_path, external=False)


def test_measure_sees_the_tree_and_kills_past_the_ceiling():
    grow = ("import subprocess, sys; subprocess.run([sys.executable, '-c', "
            "'import time; b = bytearray(300 * 2**20); b[::4096] = b\"x\" * len(b[::4096]); time.sleep(0.5)'])")
    m = bb.measure([sys.executable, "-c", grow], max_rss=8 * GB, timeout_s=60)
    assert m.rc == 0 and not m.killed
    assert m.peak_rss >= 300 * 2**20  # the grandchild's 300 MB counted
    m = bb.measure([sys.executable, "-c", grow], max_rss=200 * 2**20, timeout_s=60)
    assert m.rc is None and "over" in m.killed
    m = bb.measure([sys.executable, "-c", "import sys; sys.exit('bad input')"], max_rss=8 * GB, timeout_s=60)
    assert m.rc == 1 and m.err == "bad input"


def test_at_is_dropped_from_the_forwarded_arguments():
    assert bb.without_at(["--models", "gpt2", "--at", "abc123", "--json", "o.json"]) == [
        "--models", "gpt2", "--json", "o.json"]
    assert bb.without_at(["--at=HEAD~1", "--make-only"]) == ["--make-only"]


def test_check_written_judges_valid_equal_and_reopen(tmp_path):
    src = bb.write_synthetic(tmp_path / "a" / "a.onnx", total_bytes=2 * 32 * 32 * 4, dim=32)
    full = onnx.load(str(src))
    same = tmp_path / "same.onnx"
    onnx.save(full, str(same))  # one file now: the same numbers
    got = bb.check_written(str(src), str(same))
    assert got["valid"] and got["equal"] and got["reopen"] and got["nodes_after"] == 7, got
    w = next(t for t in full.graph.initializer if t.name == "w1")
    w.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(w) * 1.01, "w1"))
    changed = tmp_path / "changed.onnx"
    onnx.save(full, str(changed))
    got = bb.check_written(str(src), str(changed))
    assert got["valid"] and got["reopen"] and got["equal"] is False and "y differs" in got["why"], got


def test_measure_is_not_charged_with_this_process_memory():
    """A child's ru_maxrss starts from its parent's RSS at the fork: the command runs under GNU time."""
    hog = bytearray(400 * 2**20)
    hog[::4096] = b"x" * len(hog[::4096])
    m = bb.measure([sys.executable, "-c", "pass"], max_rss=8 * GB, timeout_s=60)
    del hog
    assert m.rc == 0 and m.peak_rss < 200 * 2**20, m
