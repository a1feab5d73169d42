"""Which pass broke the numbers: ddmin on its own, bisection with real probes, and ``optimize``
delivering the verified rest (or failing with ``--no-bisect``).

The broken passes come from ``tests/fv_broken_passes.py``: ``test_scale_weight`` scales the first
weight, ``test_shift_weight`` shifts the last one; both change the outputs.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx.parser
import pytest
from fv_broken_passes import register
from onnx import numpy_helper

from fusionviz import bisect, cli
from fusionviz.inputs import InputSpec, plan_inputs
from fusionviz.verify import verify

MODEL = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,8] x) => (float[1,4] y) {
    a = Identity(x)
    m = MatMul(a, W)
    s = Add(m, B)
    r = Relu(s)
    d = Dropout(r)
    y = Sigmoid(d)
}
"""


def make_model() -> onnx.ModelProto:
    model = onnx.parser.parse_model(MODEL)
    rng = np.random.default_rng(0)
    model.graph.initializer.extend([
        numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "B"),
    ])
    onnx.checker.check_model(model)
    return model


@pytest.fixture
def broken(monkeypatch):
    register(monkeypatch)


@pytest.fixture
def model_path(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(make_model(), str(path))
    return path


def _run(capsys, *argv: str) -> tuple[int, str]:
    try:
        code = cli.main(list(argv))
    except SystemExit as exc:
        code = int(exc.code)
    _, err = capsys.readouterr()
    return code, err


# ddmin on its own (rule 3), with a predicate instead of probes


def _oracle(bad_sets):
    calls = []

    def fails(subset):
        calls.append(tuple(subset))
        return any(set(b) <= set(subset) for b in bad_sets)

    return fails, calls


PASSES = [f"p{k}" for k in range(12)]


@pytest.mark.parametrize("bad", ["p0", "p5", "p11"])
def test_ddmin_finds_one_bad_pass_in_few_probes(bad):
    fails, calls = _oracle([[bad]])
    found, minimal = bisect.ddmin(PASSES, fails)
    assert found == [bad] and minimal
    assert len(calls) <= 2 * 4 + 2  # about 2·log2(12)


def test_ddmin_finds_a_pair_that_fails_only_together():
    fails, _ = _oracle([["p2", "p9"]])
    found, minimal = bisect.ddmin(PASSES, fails)
    assert sorted(found) == ["p2", "p9"] and minimal


def test_ddmin_result_is_one_minimal_with_two_independent_culprits():
    fails, _ = _oracle([["p3"], ["p8"]])
    found, minimal = bisect.ddmin(PASSES, fails)
    assert minimal and len(found) == 1 and found[0] in ("p3", "p8")


def test_ddmin_at_the_bound_returns_the_smallest_set_seen_failing():
    seen = []

    def fails(subset):
        if len(seen) == 2:
            return None
        seen.append(tuple(subset))
        return "p1" in subset

    found, minimal = bisect.ddmin(PASSES, fails)
    assert not minimal
    assert "p1" in found and len(found) < len(PASSES)
    assert tuple(found) in seen  # never a set that was not seen failing


# narrow (rule 3): the culprit by prefix, then the fewest earlier passes it needs


@pytest.mark.parametrize("bad", ["p0", "p6", "p11"])
def test_narrow_finds_one_bad_pass_in_log_probes(bad):
    fails, calls = _oracle([[bad]])
    found, culprit, minimal = bisect.narrow(PASSES, fails)
    assert found == [bad] and culprit == bad and minimal
    assert len(calls) <= 4 + 1  # ceil(log2(12)) prefixes, then the culprit alone


def test_narrow_names_the_later_pass_of_a_pair_and_its_enabler():
    fails, calls = _oracle([["p1", "p9"]])
    found, culprit, minimal = bisect.narrow(PASSES, fails)
    assert found == ["p1", "p9"] and culprit == "p9" and minimal
    assert len(calls) <= 9


def test_narrow_with_two_independent_culprits_names_the_earlier():
    fails, _ = _oracle([["p3"], ["p8"]])
    assert bisect.narrow(PASSES, fails) == (["p3"], "p3", True)


def test_narrow_at_the_bound_keeps_the_shortest_failing_prefix():
    seen = []

    def fails(subset):
        if len(seen) == 1:
            return None
        seen.append(tuple(subset))
        return "p2" in subset

    found, culprit, minimal = bisect.narrow(PASSES, fails)
    assert (found, culprit, minimal) == (PASSES[:6], None, False)


# bisection with real probes (pipeline + isolated verification)


def test_one_broken_pass_bisects_to_exactly_that_pass(broken):
    model = make_model()
    plan = plan_inputs(model, InputSpec())
    names = ["eliminate_identity", "eliminate_dropout", "fuse_matmul_add", "test_scale_weight",
             "eliminate_duplicate_initializers"]
    lines = []
    result = bisect.bisect(model, names, plan, progress=lines.append)
    assert [f.passes for f in result.findings] == [("test_scale_weight",)]
    assert result.declined == ("test_scale_weight",)
    assert result.delivered and not result.bound_hit
    assert "test_scale_weight" not in result.rest and "fuse_matmul_add" in result.rest
    assert result.describe().startswith("fails with test_scale_weight alone; passes without it")
    why = result.reasons()["test_scale_weight"]
    assert why.startswith("its result changed output 'y' on input set 'normal' beyond tolerance: max rel")
    assert len(result.probes) == len(lines) <= bisect.MAX_PROBES
    # the rest's own result, reports included: the broken pass is declined with the reason
    merged = {r.name: r for r in result.result_with_declined().reports}
    assert merged["test_scale_weight"].status == "declined"
    assert merged["test_scale_weight"].declined == why
    assert merged["fuse_matmul_add"].status == "applied"
    assert verify(model, result.rest_result.final, plan=plan).ok


def test_precision_passes_are_left_out_of_bisection(broken):
    model = make_model()
    plan = plan_inputs(model, InputSpec())
    result = bisect.bisect(model, ["eliminate_identity", "test_scale_weight", "fp16"], plan)
    assert result.excluded == ("fp16",)
    assert all("fp16" not in p.passes for p in result.probes)
    assert result.declined == ("test_scale_weight",)


def test_two_broken_passes_are_both_found(broken):
    model = make_model()
    plan = plan_inputs(model, InputSpec())
    result = bisect.bisect(model, ["eliminate_identity", "test_shift_weight", "fuse_matmul_add",
                                   "test_scale_weight"], plan)
    assert result.declined == ("test_shift_weight", "test_scale_weight")
    assert [len(f.passes) for f in result.findings] == [1, 1]
    assert result.delivered
    assert "still fails without it" in result.describe() and result.describe().count("alone") == 2


def test_a_pair_that_fails_only_together_declines_only_the_later_pass(broken):
    # test_shift_weight shifts the last float weight: an unused one, until constant folding
    # appends the folded K1 + K2 after it; so the pair fails and neither pass alone does
    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[1,8] x) => (float[1,4] y) {
            k = Add(K1, K2)
            m = MatMul(x, W)
            s = Add(m, k)
            y = Relu(s)
        }""")
    rng = np.random.default_rng(0)
    model.graph.initializer.extend([
        numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "K1"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "K2"),
        numpy_helper.from_array(np.zeros(3, np.float32), "unused"),
    ])
    plan = plan_inputs(model, InputSpec())
    result = bisect.bisect(model, ["eliminate_identity", "fold_constants", "test_shift_weight",
                                   "fuse_matmul_add"], plan)
    (finding,) = result.findings
    assert finding.passes == ("fold_constants", "test_shift_weight") and finding.minimal
    assert result.declined == ("test_shift_weight",) and result.delivered
    assert "fold_constants" in result.rest
    assert result.describe().startswith("fails with fold_constants and test_shift_weight together "
                                        "(not without any one of them); passes without test_shift_weight")
    assert result.reasons()["test_shift_weight"].startswith("together with fold_constants, its result changed")


def test_the_bound_is_said(broken):
    model = make_model()
    plan = plan_inputs(model, InputSpec())
    # probe 1 runs the whole list, probe 2 is kept for the list without what was found: no
    # probe is left to narrow the pair, so both are declined and the set is said not minimal
    result = bisect.bisect(model, ["test_shift_weight", "test_scale_weight"], plan, max_probes=2)
    assert result.bound_hit and len(result.probes) == 2
    assert [(f.passes, f.minimal) for f in result.findings] == [(("test_shift_weight", "test_scale_weight"), False)]
    assert result.delivered and result.rest == ()
    assert "not narrowed further" in result.describe() and "the bound of 2 was reached" in result.describe()


def test_a_list_that_verifies_has_nothing_to_bisect():
    model = make_model()
    plan = plan_inputs(model, InputSpec())
    result = bisect.bisect(model, ["eliminate_identity"], plan)
    assert not result.findings and not result.delivered
    assert "nothing to bisect" in result.describe()


# optimize


def test_optimize_all_declines_the_broken_pass_and_delivers_the_rest(broken, model_path, tmp_path, capsys):
    out, report = tmp_path / "o.onnx", tmp_path / "r.json"
    code, err = _run(capsys, "optimize", str(model_path), "-o", str(out), "--all", "--report", str(report))
    assert code == 0, err
    assert "note: declined test_scale_weight: its result changed output 'y' on input set 'normal' beyond " \
           "tolerance: max rel" in err
    assert ("bisect: fails with test_shift_weight alone; still fails without it; "
            "fails with test_scale_weight alone; passes without it") in err
    data = json.loads(report.read_text())
    by = {p["name"]: p for p in data["passes"]}
    assert by["test_scale_weight"]["status"] == "declined"
    assert by["test_scale_weight"]["declined"].startswith("its result changed output 'y'")
    assert by["test_shift_weight"]["status"] == "declined"  # --all holds both broken passes
    for name in ("eliminate_identity", "eliminate_dropout", "fuse_matmul_add"):
        assert by[name]["status"] == "applied", name
    assert data["verify"]["ok"] is True
    assert data["bisect"]["declined"] == ["test_shift_weight", "test_scale_weight"]
    assert data["bisect"]["probe_count"] <= data["bisect"]["max_probes"]
    written = onnx.load(str(out))
    assert {n.op_type for n in written.graph.node} == {"Gemm", "Relu", "Sigmoid"}
    assert verify(make_model(), written, plan=plan_inputs(make_model(), InputSpec())).ok


def test_optimize_explicit_passes_decline_the_same_way(broken, model_path, tmp_path, capsys):
    out = tmp_path / "o.onnx"
    code, err = _run(capsys, "optimize", str(model_path), "-o", str(out),
                     "--passes", "eliminate_identity,test_scale_weight")
    assert code == 0, err
    assert "note: declined test_scale_weight" in err
    assert [n.op_type for n in onnx.load(str(out)).graph.node].count("Identity") == 0


def test_optimize_no_bisect_fails_whole(broken, model_path, tmp_path, capsys):
    code, err = _run(capsys, "optimize", str(model_path), "-o", str(tmp_path / "o.onnx"), "--all", "--no-bisect")
    assert code == 3, err
    assert "bisect:" not in err and "bisect probe" not in err and "note: declined" not in err
    assert "Outputs differ: output 'y'" in err


def test_optimize_names_the_failing_sets_when_nothing_verifies(broken, model_path, tmp_path, capsys,
                                                               monkeypatch):
    monkeypatch.setattr(bisect, "MAX_PROBES", 2)
    code, err = _run(capsys, "optimize", str(model_path), "-o", str(tmp_path / "o.onnx"),
                     "--passes", "test_shift_weight,test_scale_weight")
    assert code == 3, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("fusionviz: error: Outputs differ")
    assert "bisection: fails with test_shift_weight alone; still fails without it" in last
    assert "the bound of 2 was reached" in last
