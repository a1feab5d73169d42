"""Verification a user can believe: noise floor, NaN rules, input sets named in the verdict."""

from __future__ import annotations

import numpy as np
import onnx.parser
import pytest

from fusionviz.inputs import plan_inputs
from fusionviz.verify import compare, verify


def test_near_zero_elements_of_a_large_output_do_not_fail():
    ref = np.array([1000.0, 1e-7, -2e-7], np.float32)
    got = ref + np.array([1e-4, 3e-4, -2e-4], np.float32)  # rounding noise of the large element
    d = compare(ref, got, "y")
    assert d.ok and d.max_rel_diff < 1e-6


def test_an_output_that_is_wrong_fails():
    ref = np.linspace(-1, 1, 100, dtype=np.float32)
    d = compare(ref, ref * 1.01, "y")
    assert not d.ok and d.mismatches > 0


def test_new_nan_fails_and_shared_nan_is_equal():
    ref = np.array([0.0, np.nan, np.inf, 1.0], np.float32)
    assert compare(ref, ref.copy(), "y").ok
    got = ref.copy()
    got[0] = -np.inf
    d = compare(ref, got, "y", input_set="zeros")
    assert not d.ok and d.new_nonfinite == 1
    assert "new NaN/Inf in output 'y' on input set 'zeros'" in d.describe()
    got = ref.copy()
    got[2] = -np.inf  # a different non-finite value where the original had one
    assert not compare(ref, got, "y").ok


def test_a_float16_output_is_held_to_its_own_rounding_steps():
    """An fp16 classifier's probabilities move by one fp16 step (9.8e-4 at 0.98) when onnxruntime
    fuses its graph: equal. A change of several steps is not; float32 keeps its tight test."""
    ref = np.array([0.02145, 0.9785], np.float16)
    one_step = np.array([0.02145, 0.9775], np.float16)
    assert compare(ref, one_step, "y").ok
    assert not compare(ref, np.array([0.02145, 0.9700], np.float16), "y").ok
    assert not compare(ref.astype(np.float32), one_step.astype(np.float32), "y").ok


def test_integer_outputs_must_be_equal():
    ref = np.array([1, 2, 3], np.int64)
    assert compare(ref, ref.copy(), "i").ok
    assert not compare(ref, np.array([1, 2, 4], np.int64), "i").ok


def test_reference_noise_widens_the_floor():
    ref = np.array([0.5, 0.25], np.float32)
    got = ref + np.float32(2e-4)
    assert not compare(ref, got, "p").ok
    assert compare(ref, got, "p", noise=1e-4).ok  # onnxruntime's own optimizer moves it by 1e-4


LOG = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1, 16] x) => (float[1, 16] y) {
    eps = Constant <value = float {1e-10}> ()
    sq = Mul(x, x)
    s = Add(sq, eps)
    y = Log(s)
}
"""


def test_dropping_an_epsilon_is_caught_on_silence():
    original = onnx.parser.parse_model(LOG)
    broken = onnx.parser.parse_model(LOG.replace("s = Add(sq, eps)", "s = Identity(sq)"))
    v = verify(original, broken)
    assert not v.ok
    assert v.first_failure.input_set == "zeros" and v.new_nonfinite > 0
    assert "input set 'zeros'" in v.summary()
    assert v.input_sets == ("normal", "zeros", "edge")


def test_equal_models_verify_on_all_sets_isolated():
    m = onnx.parser.parse_model(LOG)
    v = verify(m, m, isolated=True)
    assert v.ok and v.input_sets == ("normal", "zeros", "edge")
    assert v.as_dict()["failure"] is None


@pytest.mark.parametrize("isolated", [False, True])
def test_probe_finds_a_length_the_model_runs_on(isolated):
    from fusionviz.verify import probe

    # Reflect padding of 64 needs more than 64 samples: the default (16000) runs at once,
    # and a too-short declared default is escalated.
    m = onnx.parser.parse_model("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[1, 1, L] x) => (float[1, 1, M] y) {
    pads = Constant <value = int64[6] {0, 0, 64, 0, 0, 64}> ()
    y = Pad <mode = "reflect"> (x, pads)
}
""")
    plan = plan_inputs(m)
    assert plan.shapes()["x"] == [1, 1, 1]
    probed = probe(m, plan, isolated=isolated)
    assert probed.shapes()["x"][2] > 64 and probed.probed
