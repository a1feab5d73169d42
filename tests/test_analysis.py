"""Static memory plan and FLOPs against hand-computed small cases."""

from __future__ import annotations

import onnx
import onnx.parser
import pytest

from fusionviz import analysis, samples
from fusionviz.analysis import memory_plan, model_cost

H = '<ir_version: 8, opset_import: ["" : 17]>'


def parse(body: str) -> onnx.ModelProto:
    return onnx.parser.parse_model(H + body)


def test_three_node_chain_plan():
    # x -> Relu -> a -> Sigmoid -> b -> Tanh -> y, every tensor 1x1000 float = 4000 bytes.
    plan = memory_plan(parse("g (float[1,1000] x) => (float[1,1000] y) { a = Relu(x) b = Sigmoid(a) y = Tanh(b) }"))
    lives = {t.name: (t.bytes, t.start, t.end) for t in plan.tensors}
    assert lives == {"a": (4000, 0, 1), "b": (4000, 1, 2), "y": (4000, 2, 2)}
    assert plan.sum_intermediate_bytes == 8000  # a + b (y is an output)
    assert plan.peak_bytes_no_reuse == 12000  # a + b + y, each its own buffer
    assert plan.peak_bytes_reuse == 8000  # two tensors live at any step
    assert plan.live_bytes == (4000, 8000, 8000)
    assert plan.input_bytes == 4000 and plan.weight_bytes == 0 and plan.unknown_tensors == 0


def test_long_lived_tensor_raises_the_reuse_peak():
    # a:4000 [0,1]; b:8000 [1,3] (read again by the last node); c:8000 [2,3]; y:8000 output [3,3]
    plan = memory_plan(parse("""g (float[1,1000] x) => (float[1,2000] y) {
        a = Relu(x)
        b = Concat<axis=1>(a, a)
        c = Sigmoid(b)
        y = Add(c, b)
    }"""))
    assert plan.live_bytes == (4000, 12000, 16000, 24000)
    assert plan.sum_intermediate_bytes == 20000
    assert plan.peak_bytes_no_reuse == 28000
    assert plan.peak_bytes_reuse == 24000
    assert plan.peak_step == 3


def test_constants_are_weights_and_shape_overrides_apply():
    model = parse("""g (float[N,10] x) => (float[N,10] y) {
        w = Constant<value = float[10] {1,1,1,1,1,1,1,1,1,1}>()
        a = Mul(x, w)
        y = Relu(a)
    }""")
    plan = memory_plan(model, {"x": [3, 10]})
    assert [t.name for t in plan.tensors] == ["a", "y"]
    assert plan.weight_bytes == 40
    assert plan.sum_intermediate_bytes == 3 * 10 * 4
    assert memory_plan(model).sum_intermediate_bytes == 1 * 10 * 4  # unknown dim -> 1, like make_inputs


def test_unknown_shapes_are_counted_not_guessed():
    model = onnx.parser.parse_model('<ir_version: 8, opset_import: ["" : 17, "custom.x": 1]>' +
                                    "g (float[4] x) => (float[4] y) { a = custom.x.Foo(x) y = Relu(a) }")
    plan = memory_plan(model)
    assert plan.unknown_tensors >= 1


def test_conv_flops_by_hand():
    # N=1, Cin=3, H=W=8, Cout=4, 3x3, pad 1 -> out 1x4x8x8 = 256; MACs = 256 * 3*3*3 = 6912.
    m = parse("""g (float[1,3,8,8] x, float[4,3,3,3] w, float[4] b) => (float[1,4,8,8] y) {
        y = Conv<pads=[1,1,1,1]>(x, w, b) }""")
    node = model_cost(m).per_node[0]
    assert node["macs"] == 6912
    assert node["flops"] == 2 * 6912 + 256  # multiply-adds + bias
    grouped = parse("""g (float[1,4,8,8] x, float[4,1,3,3] w) => (float[1,4,8,8] y) {
        y = Conv<pads=[1,1,1,1], group=4>(x, w) }""")
    assert model_cost(grouped).macs == 256 * 9  # depthwise: one input channel per output


def test_matmul_and_gemm_flops_by_hand():
    mm = parse("g (float[2,5,7] a, float[7,3] b) => (float[2,5,3] y) { y = MatMul(a, b) }")
    assert model_cost(mm).macs == 2 * 5 * 3 * 7
    assert model_cost(mm).flops == 2 * 2 * 5 * 3 * 7
    gemm = parse("g (float[7,5] a, float[3,7] b, float[3] c) => (float[5,3] y) { y = Gemm<transA=1, transB=1>(a, b, c) }")
    cost = model_cost(gemm)
    assert cost.macs == 5 * 3 * 7
    assert cost.flops == 2 * 5 * 3 * 7 + 5 * 3
    assert set(cost.as_dict()) >= {"flops", "macs", "params"}


def test_params_count_each_initializer_once():
    m = parse("""g (float[1,4] x) => (float[1,4] y) <float[4,4] w = {1,0,0,0,0,1,0,0,0,0,1,0,0,0,0,1}> {
        a = MatMul(x, w)
        y = MatMul(a, w)
    }""")
    cost = model_cost(m)
    assert cost.params == 16
    assert [n["params"] for n in cost.per_node] == [16, 16]


def test_fused_conv_contrib_op_has_known_size():
    m = onnx.parser.parse_model('<ir_version: 8, opset_import: ["" : 17, "com.microsoft": 1]>' + """
g (float[1,3,8,8] x, float[4,3,3,3] w) => (float[1,4,8,8] y) {
    a = com.microsoft.FusedConv<activation="Relu", pads=[1,1,1,1]>(x, w)
    y = Sigmoid(a)
}""")
    plan = memory_plan(m)
    assert plan.unknown_tensors == 0
    assert plan.sum_intermediate_bytes == 4 * 8 * 8 * 4
    assert model_cost(m).macs == 256 * 27


def test_topological_order_is_restored_when_nodes_are_shuffled():
    m = parse("g (float[1,1000] x) => (float[1,1000] y) { a = Relu(x) b = Sigmoid(a) y = Tanh(b) }")
    nodes = list(m.graph.node)
    del m.graph.node[:]
    m.graph.node.extend(reversed(nodes))
    assert [n.op_type for n in analysis._execution_order(m.graph)] == ["Relu", "Sigmoid", "Tanh"]
    assert memory_plan(m).peak_bytes_reuse == 8000


@pytest.mark.skipif("resnet_ts" not in samples.sample_names(), reason="sample models not built")
def test_conv_bn_relu_fusion_lowers_intermediate_bytes_on_resnet():
    from fusionviz.passes import registry, run_pipeline

    needed = {"fold_batchnorm", "fuse_conv_activation"}
    if not needed <= set(registry.pass_names()):
        pytest.skip("fusion passes not registered")
    m = samples.load_sample("resnet_ts").proto
    fused = run_pipeline(m, sorted(needed)).final
    before, after = memory_plan(m), memory_plan(fused)
    assert before.unknown_tensors == 0 and after.unknown_tensors == 0  # a fair comparison
    assert after.sum_intermediate_bytes < before.sum_intermediate_bytes
    assert after.peak_bytes_reuse < before.peak_bytes_reuse
    # FLOPs: the convolutions' MACs are unchanged; BN (and separate ReLU) work is gone.
    assert model_cost(fused).macs == model_cost(m).macs
    assert model_cost(fused).flops < model_cost(m).flops


# ------------------------------------------------------------------ control-flow bodies (rule 6)

IF_MODEL = """g (float[1,1000] x, bool c) => (float[1,1000] y) {
    y = If(c) <
        then_branch = a () => (float[1,1000] t) { t1 = Relu(x) t2 = Sigmoid(t1) t = Tanh(t2) },
        else_branch = e () => (float[1,1000] f) { f = Neg(x) }
    >
}"""


def test_if_counts_its_larger_branch():
    plan = memory_plan(parse(IF_MODEL))
    # then_branch: t1, t2, t (4000 B each) beside the If's own output y; else_branch is smaller.
    assert plan.sum_intermediate_bytes == 12000
    assert plan.peak_bytes_no_reuse == 16000
    assert plan.peak_bytes_reuse == 4000 + 8000  # y, and the branch's own peak (t2 + t)
    assert plan.unknown_tensors == 0
    assert {t.name: t.body for t in plan.tensors} == {"y": "", "t1": "#0/then_branch",
                                                      "t2": "#0/then_branch", "t": "#0/then_branch"}
    assert model_cost(parse(IF_MODEL)).flops == 3000  # Relu, Sigmoid, Tanh over 1000 elements


def test_loop_counts_its_body_once():
    plan = memory_plan(parse("""g (float[1,1000] x) => (float[1,1000] z) {
        trip = Constant<value = int64 {3}>()
        go = Constant<value = bool {1}>()
        z = Loop(trip, go, x) <
            body = b (int64 i, bool cin, float[1,1000] acc) => (bool cout, float[1,1000] acc2) {
                cout = Identity(cin)
                s = Add(acc, x)
                acc2 = Relu(s)
            }
        >
    }"""))
    body = {t.name: t.bytes for t in plan.tensors if t.body == "#2/body"}
    assert body == {"cout": 1, "s": 4000, "acc2": 4000}
    assert plan.sum_intermediate_bytes == 8001 and plan.peak_bytes_no_reuse == 12001


def test_nested_bodies_and_body_weights_count():
    from fusionviz.graphview.synthetic import control_flow_model

    m = control_flow_model()
    plan = memory_plan(m, {"x": [1, 8]})
    assert {t.body for t in plan.tensors} == {"", "If_2/then_branch", "Loop_5/body",
                                              "Loop_5/body/steps/If_2/then_branch"}
    assert plan.unknown_tensors == 0
    with_const = parse("""g (float[2] x, bool c) => (float[2] y) {
        y = If(c) <
            then_branch = a () => (float[2] t) { two = Constant<value = float[2] {2.0, 2.0}>() t = Mul(x, two) },
            else_branch = e () => (float[2] f) { f = Neg(x) }
        >
    }""")
    assert memory_plan(with_const).weight_bytes == 8
    assert model_cost(with_const).params == 2


def test_silero_vad_memory_is_its_branches_not_one_byte():
    from fusionviz.corpus import load_manifest
    from fusionviz.corpus.fetch import path_of, select

    path = path_of(select(load_manifest(), only=["silero_vad_v6"])[0])
    if path is None:
        pytest.skip("silero_vad_v6 is not in the corpus cache (python -m fusionviz.corpus.fetch)")
    plan = memory_plan(onnx.load(path), {"input": [1, 512], "state": [2, 1, 128]})
    assert plan.sum_intermediate_bytes > 100_000 and plan.peak_bytes_reuse > 100_000
    assert plan.weight_bytes > 2_000_000  # both branches' weights
