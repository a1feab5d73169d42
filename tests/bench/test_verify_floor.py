"""The benchmark judges variants with ``optimize``'s own test, noise floor included: the original
under onnxruntime's level all is not "unverified" because level all's own kernels round
differently, while a variant that really changes the outputs still fails."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
from onnx import numpy_helper

from fusionviz.bench.runner import Settings, Variant, run_benchmark

MEAN = 1e5  # a conv output near 1e5 less a BatchNorm mean of 1e5: level all's folding rounds at 1e5


def conv_bn(gamma: float = 1.0) -> onnx.ModelProto:
    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[1,4,8,8] x) => (float[1,4,8,8] y) {
            c = Conv(x, W, B)
            y = BatchNormalization(c, G, Be, Mu, V)
        }""")
    model.graph.initializer.extend([
        numpy_helper.from_array(np.eye(4, dtype=np.float32).reshape(4, 4, 1, 1), "W"),
        numpy_helper.from_array(np.full(4, MEAN, np.float32), "B"),
        numpy_helper.from_array(np.full(4, gamma, np.float32), "G"),
        numpy_helper.from_array(np.zeros(4, np.float32), "Be"),
        numpy_helper.from_array(np.full(4, MEAN, np.float32), "Mu"),
        numpy_helper.from_array(np.ones(4, np.float32), "V"),
    ])
    onnx.checker.check_model(model)
    return model


def test_level_all_is_judged_with_the_noise_floor_and_a_real_change_is_not():
    ref = conv_bn()
    res = run_benchmark([Variant("ort all", ref, Settings(level="all")), Variant("gamma x2", conv_bn(2.0))],
                        min_time_s=0.05, warmup=1, verify_against=ref)
    by = {r.label: r for r in res}
    level_all = by["ort all"].verify
    (out,) = level_all["outputs"]
    # level all moves y by ~4e-3 (rounding at 1e5): beyond rtol/atol alone, within the floor
    assert out["max_abs_diff"] > 1e-3
    assert out["floor"] > out["max_abs_diff"]
    assert level_all["ok"] is True, level_all
    assert by["gamma x2"].verify["ok"] is False
    assert "beyond tolerance" in by["gamma x2"].verify["failure"]
