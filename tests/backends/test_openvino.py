"""OpenVINO: outputs match onnxruntime, the executed graph keeps provenance, failures are clear."""

from __future__ import annotations

import numpy as np
import pytest

from fusionviz import samples
from fusionviz.backends import BackendError, get_backend
from fusionviz.graphview.compiled import absorbed_map, executed_diff
from tests.backends.conftest import close, needs_openvino

pytestmark = needs_openvino


@pytest.fixture(scope="module")
def resnet():
    return samples.load_sample("resnet_ts").proto


@pytest.fixture(scope="module")
def resnet_compiled(resnet):
    return get_backend("openvino").compile(resnet.SerializeToString(), threads=1,
                                           settings={"profile_layers": True})


def _ort(model, feeds):
    return get_backend("ort").compile(model.SerializeToString(), settings={"level": "all"}).run(feeds)


def test_tiny_model_matches_onnxruntime(elementwise, inputs_for):
    feeds = inputs_for(elementwise)
    got = get_backend("openvino").compile(elementwise.SerializeToString()).run(feeds)
    assert close(got["y"], _ort(elementwise, feeds)["y"])


def test_conv_bn_relu_matches_onnxruntime_and_is_one_layer(conv_bn_relu, inputs_for):
    feeds = inputs_for(conv_bn_relu)
    c = get_backend("openvino").compile(conv_bn_relu.SerializeToString())
    assert close(c.run(feeds)["y"], _ort(conv_bn_relu, feeds)["y"])
    mapping = absorbed_map(c.executed_graph())
    assert mapping["block/conv"] == mapping["block/bn"] == mapping["block/relu"]


def test_resnet_matches_onnxruntime(resnet, resnet_compiled):
    rng = np.random.default_rng(0)
    feeds = {"input": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
    got = resnet_compiled.run(feeds)
    want = _ort(resnet, feeds)
    assert list(got) == list(want)
    for name in want:
        assert close(got[name], want[name])


def test_resnet_convolution_absorbs_conv_bn_relu(resnet, resnet_compiled):
    graph = resnet_compiled.executed_graph()
    ops = {n.name: n.op_type for n in resnet.graph.node}
    hits = [layer for layer in graph.layers if layer.layer_type == "Convolution"
            and {"Conv", "BatchNormalization", "Relu"} <= {ops.get(k) for k in layer.absorbed}]
    assert hits, "no Convolution layer absorbed a Conv, a BatchNormalization and a Relu"
    first = next(layer for layer in hits if "/conv1/Conv" in layer.absorbed)
    assert first.absorbed == ("/conv1/Conv", "/bn1/BatchNormalization", "/relu/Relu")
    assert first.precision == "f32" and first.output_layout and first.exec_order is not None
    assert not first.inferred
    # Every ONNX node is computed by some executed layer, and layouts changes are there.
    assert set(absorbed_map(graph)) == set(ops)
    assert any(layer.is_reorder for layer in graph.layers)


def test_resnet_layer_times_and_profile(resnet_compiled):
    feeds = {"input": np.zeros((1, 3, 224, 224), np.float32)}
    prof = resnet_compiled.profile(feeds, 2)
    assert prof["runs"] == 2 and prof["by_op_type"].get("Convolution", 0) > 0
    graph = resnet_compiled.executed_graph().with_times({k: v["ms"] for k, v in prof["by_node"].items()})
    convs = [layer for layer in graph.layers if layer.layer_type == "Convolution"]
    assert convs and all(layer.time_ms is not None and layer.time_ms > 0 for layer in convs)


def test_executed_diff_marks_absorbed_nodes_on_the_original(resnet, resnet_compiled):
    diff = executed_diff(resnet, resnet_compiled.executed_graph())
    assert diff.status_before["/conv1/Conv"] == "changed"
    assert diff.contributors["/conv1/Conv"] == ["/bn1/BatchNormalization", "/relu/Relu"]
    assert diff.status_before["/bn1/BatchNormalization"] == "removed"
    assert diff.fused_into["/relu/Relu"] == diff.fused_into["/bn1/BatchNormalization"]
    assert diff.status_before["/maxpool/MaxPool"] == "unchanged"


def test_denormal_setting_is_applied():
    from fusionviz.samples import load_sample

    model = load_sample("resnet_ts").proto.SerializeToString()
    on = get_backend("openvino").compile(model, settings={"denormal_as_zero": True}).applied()
    off = get_backend("openvino").compile(model).applied()
    assert on["CPU_DENORMALS_OPTIMIZATION"] == "True" and off["CPU_DENORMALS_OPTIMIZATION"] == "False"
    assert on["INFERENCE_PRECISION_HINT"] == "f32"


def test_dynamic_rank_if_fails_with_one_sentence(dynamic_rank_if, inputs_for):
    feeds = inputs_for(dynamic_rank_if)
    assert _ort(dynamic_rank_if, feeds)["y"].shape == (3,)  # onnxruntime runs it
    with pytest.raises(BackendError) as info:
        get_backend("openvino").compile(dynamic_rank_if.SerializeToString())
    text = str(info.value)
    assert text.startswith("OpenVINO cannot compile the model:")
    assert "dynamic rank" in text and "\n" not in text and "src/" not in text


def test_scalar_input_stays_a_scalar():
    """A 0-d input (silero's sample rate) reaches OpenVINO as a 0-d tensor, in run and in the
    timed call (a contiguous copy made it 1-d, which OpenVINO refuses)."""
    import onnx.parser

    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[4] x, int64 sr) => (float[4] y) {
            f = Cast <to = 1> (sr)
            y = Mul(x, f)
        }""")
    feeds = {"x": np.arange(4, dtype=np.float32), "sr": np.array(16000, dtype=np.int64)}
    c = get_backend("openvino").compile(model.SerializeToString(), threads=1,
                                        settings={"input_shapes": {"x": [4], "sr": []}})
    assert close(c.run(feeds)["y"], np.arange(4) * 16000.0)
    c.prepare(feeds)()


def test_input_named_as_the_onnx_model_names_it():
    """OpenVINO merges the name of a no-op Cast's output into the input it reads and may report
    that alias; the feeds keep the ONNX input's own name (tf2onnx / torch exports do this)."""
    import onnx.parser

    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2,2] x) => (float[2,2] y) {
            a = Cast <to = 1> (x)
            y = Relu(a)
        }""")
    c = get_backend("openvino").compile(model.SerializeToString(), threads=1)
    assert list(c.input_dtypes()) == ["x"]
    x = np.array([[-1.0, 2.0], [3.0, -4.0]], dtype=np.float32)
    assert close(c.run({"x": x})["y"], np.maximum(x, 0))
