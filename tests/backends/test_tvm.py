"""TVM (Relax, untuned): outputs match onnxruntime and fused functions name their ONNX nodes.

Skipped, with TVM's own reason, where the apache-tvm package does not import.
"""

from __future__ import annotations

import pytest

from fusionviz.backends import get_backend
from fusionviz.graphview.compiled import absorbed_map, render_executed
from tests.backends.conftest import close, needs_tvm

pytestmark = needs_tvm


def _ort(model, feeds):
    return get_backend("ort").compile(model.SerializeToString(), settings={"level": "all"}).run(feeds)


def test_elementwise_fuses_into_one_function_and_matches(elementwise, inputs_for):
    feeds = inputs_for(elementwise)
    c = get_backend("tvm").compile(elementwise.SerializeToString())
    assert close(c.run(feeds)["y"], _ort(elementwise, feeds)["y"])
    graph = c.executed_graph()
    kernels = [layer for layer in graph.layers if not layer.is_io]
    assert len(kernels) == 1 and kernels[0].layer_type.startswith("fused_")
    mapping = absorbed_map(graph)
    keys = {n.name or f"#{i}" for i, n in enumerate(elementwise.graph.node)}
    assert {mapping[k] for k in keys - {"#0"}} == {kernels[0].name}
    assert c.applied()["tuned"] is False


def test_conv_bn_relu_provenance_and_profile(conv_bn_relu, inputs_for):
    feeds = inputs_for(conv_bn_relu)
    c = get_backend("tvm").compile(conv_bn_relu.SerializeToString())
    assert close(c.run(feeds)["y"], _ort(conv_bn_relu, feeds)["y"])
    graph = c.executed_graph()
    conv = next(layer for layer in graph.layers if "conv2d" in layer.layer_type)
    # The batch norm is decomposed and folded into the convolution's function; nothing is guessed.
    assert conv.absorbed[:2] == ("block/conv", "block/bn") and not conv.inferred
    assert set(absorbed_map(graph)) == {"block/conv", "block/bn", "block/relu", "head/pool"}
    assert conv.inputs == ("input:x",) and conv.precision == "float32" and conv.shape == "[1, 8, 16, 16]"
    prof = c.profile(feeds, 2)
    assert prof["runs"] == 2 and conv.name in prof["by_node"]
    timed = graph.with_times({k: v["ms"] for k, v in prof["by_node"].items()})
    dot = render_executed(timed).dot
    assert "block/conv" in dot and "block/bn" in dot and " ms" in dot


def test_unsupported_op_is_one_sentence():
    import onnx.parser

    from fusionviz.backends import BackendError

    model = onnx.parser.parse_model('<ir_version: 8, opset_import: ["" : 17, "custom.x": 1]>'
                                    "g (float[1,4] x) => (float[1,4] y) { y = custom.x.Foo(x) }")
    with pytest.raises(BackendError) as info:
        get_backend("tvm").compile(model.SerializeToString())
    assert str(info.value).startswith("TVM cannot compile the model:") and "\n" not in str(info.value)


def test_bench_measures_tvm_beside_ort(elementwise):
    from fusionviz.bench import Settings, Variant, run_benchmark

    res = run_benchmark([Variant("ort", elementwise, Settings(level="all")),
                         Variant("tvm", elementwise, Settings(backend="tvm", denormal_as_zero=True))],
                        min_time_s=0.05, verify_against=elementwise, timeout_s=120)
    by = {r.label: r for r in res}
    assert by["tvm"].error is None, by["tvm"].error
    assert by["tvm"].verify["ok"] and by["tvm"].stats.n > 0
    assert by["tvm"].backend_info["denormals_as_zero"] == "not supported"
