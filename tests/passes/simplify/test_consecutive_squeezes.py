"""fold_squeezes: two Squeezes become one; cases it must leave alone are named."""

from __future__ import annotations

import pytest

from fusionviz.passes.simplify.fold_squeezes import merged_axes
from fusionviz.verify import verify
from tests.passes.conftest import changes_of, ops, parse

NAME = "fold_squeezes"


def _model(opset: int, x_type: str, first: str, second: str, out: str, extra: str = "") -> str:
    return (f'<ir_version: 8, opset_import: ["" : {opset}]>\n'
            f"g ({x_type} x) => ({out} y{extra}) {{\n  m = {first}\n  y = {second}\n}}")


@pytest.mark.parametrize(
    ("text", "axes"),
    [
        pytest.param(_model(13, "float[1,3,1,4]", "Squeeze(x, a1)", "Squeeze(m, a2)", "float[3,4]")
                     .replace(") {\n", ") <int64[1] a1 = {0}, int64[1] a2 = {1}> {\n", 1),
                     [0, 2], id="axes_as_inputs"),
        pytest.param(_model(11, "float[1,3,1,4]", "Squeeze<axes=[2]>(x)", "Squeeze<axes=[0]>(m)", "float[3,4]"),
                     [0, 2], id="axes_as_attributes_second_before_first"),
        pytest.param(_model(11, "float[2,1,5,1,1]", "Squeeze<axes=[-1]>(x)", "Squeeze<axes=[-1, 1]>(m)",
                            "float[2,5]"), [1, 3, 4], id="negative_axes_with_known_rank"),
    ],
)
def test_two_squeezes_become_one_and_outputs_stay_equal(run, text, axes):
    model = parse(text)
    result = run(model, NAME)
    assert ops(result.final) == ["Squeeze"] or ops(result.final) == ["Constant", "Squeeze"]
    (change,) = changes_of(result, NAME)
    assert change.kind.value == "fused" and change.in_ops == ("Squeeze", "Squeeze")
    v = verify(result.original, result.final)
    assert v.ok, v.error
    squeeze = result.final.graph.node[-1]
    got = [list(a.ints) for a in squeeze.attribute if a.name == "axes"]
    if not got:
        import onnx.numpy_helper

        init = {t.name: onnx.numpy_helper.to_array(t) for t in result.final.graph.initializer}
        const = [n for n in result.final.graph.node if n.op_type == "Constant"]
        got = [init[squeeze.input[1]].tolist()] if squeeze.input[1] in init else [
            onnx.numpy_helper.to_array(const[0].attribute[0].t).tolist()]
    assert got == [axes]


def test_three_squeezes_merge_to_a_fixed_point(run):
    text = ('<ir_version: 8, opset_import: ["" : 11]>\n'
            "g (float[1,1,1,7] x) => (float[7] y) {\n  a = Squeeze<axes=[0]>(x)\n"
            "  b = Squeeze<axes=[0]>(a)\n  y = Squeeze<axes=[0]>(b)\n}")
    result = run(parse(text), NAME)
    assert ops(result.final) == ["Squeeze"]
    assert verify(result.original, result.final).ok


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(_model(11, "float[1,3,1,4]", "Squeeze<axes=[0]>(x)", "Squeeze(m)", "float[3,4]"),
                     id="squeeze_without_axes_is_left_alone"),
        pytest.param(_model(11, "float[1,3,1,4]", "Squeeze<axes=[0]>(x)", "Squeeze<axes=[1]>(m)", "float[3,4]",
                            ", float[3,1,4] m"), id="intermediate_that_is_a_graph_output_is_kept"),
    ],
)
def test_squeezes_that_must_stay(run, text):
    model = parse(text)
    result = run(model, NAME)
    assert changes_of(result, NAME) == []
    assert ops(result.final) == ops(model)


def test_merged_axes_maps_the_second_squeeze_back_to_the_input():
    assert merged_axes([0], [1]) == [0, 2]
    assert merged_axes([1, 3], [0, 1]) == [0, 1, 2, 3]
    assert merged_axes([4], [0]) == [0, 4]
