"""Constant values identified by content: storage, Constant attribute forms, external data."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from fusionviz.graphview.values import ConstantValues


def _graph(nodes=(), inits=()) -> onnx.GraphProto:
    return helper.make_graph(list(nodes), "g", [], [], initializer=list(inits))


def _same(g1: onnx.GraphProto, n1: str, g2: onnx.GraphProto, n2: str, **kw) -> bool:
    return ConstantValues(g1, **kw.get("kw1", {})).same(n1, ConstantValues(g2, **kw.get("kw2", {})), n2)


ARR = np.arange(12, dtype=np.float32).reshape(3, 4) / 7


@pytest.mark.parametrize("node, init", [
    pytest.param(helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(ARR)),
                 numpy_helper.from_array(ARR, "w"), id="value_tensor"),
    pytest.param(helper.make_node("Constant", [], ["c"], value_ints=[3, -1]),
                 numpy_helper.from_array(np.array([3, -1], dtype=np.int64), "w"), id="value_ints"),
    pytest.param(helper.make_node("Constant", [], ["c"], value_int=7),
                 numpy_helper.from_array(np.array(7, dtype=np.int64), "w"), id="value_int"),
    pytest.param(helper.make_node("Constant", [], ["c"], value_float=0.5),
                 numpy_helper.from_array(np.array(0.5, dtype=np.float32), "w"), id="value_float"),
    pytest.param(helper.make_node("Constant", [], ["c"], value_floats=[0.5, 2.0]),
                 helper.make_tensor("w", onnx.TensorProto.FLOAT, [2], [0.5, 2.0]), id="value_floats_typed_init"),
    pytest.param(helper.make_node("Constant", [], ["c"], value_strings=[b"a", b"bc"]),
                 helper.make_tensor("w", onnx.TensorProto.STRING, [2], [b"a", b"bc"]), id="value_strings"),
])
def test_constant_node_and_initializer_with_the_same_content_are_the_same(node, init):
    assert _same(_graph([node]), "c", _graph(inits=[init]), "w")


def test_raw_and_typed_storage_are_the_same_value():
    raw = numpy_helper.from_array(ARR, "a")
    typed = helper.make_tensor("b", onnx.TensorProto.FLOAT, ARR.shape, ARR.reshape(-1).tolist())
    assert raw.raw_data and not typed.raw_data
    assert _same(_graph(inits=[raw]), "a", _graph(inits=[typed]), "b")
    half = ARR.astype(np.float16)
    assert _same(_graph(inits=[numpy_helper.from_array(half, "a")]), "a",
                 _graph(inits=[helper.make_tensor("b", onnx.TensorProto.FLOAT16, half.shape,
                                                  half.reshape(-1).tolist())]), "b")


@pytest.mark.parametrize("other", [
    pytest.param(numpy_helper.from_array(ARR + 1e-7, "b"), id="other_bytes"),
    pytest.param(numpy_helper.from_array(ARR.reshape(4, 3), "b"), id="other_dims"),
    pytest.param(numpy_helper.from_array(ARR.astype(np.float64), "b"), id="other_dtype"),
])
def test_values_that_differ_are_not_the_same(other):
    assert not _same(_graph(inits=[numpy_helper.from_array(ARR, "a")]), "a", _graph(inits=[other]), "b")


def _external(name: str, location: str, offset: int = 0, length: int = ARR.nbytes) -> onnx.TensorProto:
    t = onnx.TensorProto(name=name, data_type=onnx.TensorProto.FLOAT, dims=ARR.shape)
    t.data_location = onnx.TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
        t.external_data.add(key=k, value=v)
    return t


def test_external_tensors_at_the_same_place_are_equal_without_reading():
    # no file exists: equality comes from the place alone
    g = _graph(inits=[_external("a", "w.bin")])
    assert _same(g, "a", _graph(inits=[_external("b", "w.bin")]), "b")
    assert not _same(g, "a", _graph(inits=[_external("b", "w.bin", offset=48)]), "b")


def test_external_tensor_is_read_when_compared_with_an_inline_one(tmp_path):
    (tmp_path / "w.bin").write_bytes(b"\0" * 16 + ARR.tobytes())
    ext = _graph(inits=[_external("a", "w.bin", offset=16)])
    inline = _graph(inits=[numpy_helper.from_array(ARR, "b")])
    assert _same(ext, "a", inline, "b", kw1={"base_dir": tmp_path})
    assert not _same(ext, "a", _graph(inits=[numpy_helper.from_array(ARR * 2, "b")]), "b",
                     kw1={"base_dir": tmp_path})
    assert not _same(ext, "a", inline, "b")  # no folder given: the place is all it knows


def test_a_location_outside_the_folder_is_not_read(tmp_path):
    (tmp_path / "w.bin").write_bytes(ARR.tobytes())
    inner = tmp_path / "model"
    inner.mkdir()
    ext = _graph(inits=[_external("a", "../w.bin")])
    assert not _same(ext, "a", _graph(inits=[numpy_helper.from_array(ARR, "b")]), "b", kw1={"base_dir": inner})


def test_describe_and_membership():
    vals = ConstantValues(_graph([helper.make_node("Constant", [], ["c"], value_ints=[1, 2])],
                                 [numpy_helper.from_array(ARR, "w")]))
    assert "c" in vals and "w" in vals and "x" not in vals
    assert vals.is_initializer("w") and not vals.is_initializer("c")
    assert vals.describe("w") == "[3,4] float" and vals.describe("c") == "[2] int64"
