"""The committed sample models: present, loadable, runnable, and keeping their promises.

Each sample is chosen to show particular passes; these tests check the structure that makes it
useful for that (BatchNorm kept, CastLike bias blocks, attention ops, every textbook
opportunity), that BatchNorm statistics are non-trivial, and that sibling exports of the same
network compute the same function.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from fusionviz import cli, inputs, model_io, samples

SAMPLE_DIR = samples.SAMPLE_DIR
INDEX = json.loads((SAMPLE_DIR / "samples.json").read_text())
NAMES = [e["name"] for e in INDEX]
MAX_BYTES = 15 * 1024 * 1024
MAX_TOTAL_BYTES = 25 * 1024 * 1024

EXPECTED = {"resnet_ts", "resnet_dynamo", "bert_ts", "bert_dynamo", "mobilenet", "efficientnet", "textbook"}

# Ops each sample must contain (independent of the must_have list the script writes).
REQUIRED_OPS = {
    "resnet_ts": {"Conv", "BatchNormalization", "Relu", "Add", "MaxPool", "Gemm"},
    "resnet_dynamo": {"Conv", "BatchNormalization", "CastLike", "Expand"},
    "bert_ts": {"Softmax", "Erf", "MatMul", "LayerNormalization", "Transpose"},
    "bert_dynamo": {"Softmax", "Erf", "MatMul", "LayerNormalization", "Transpose"},
    "mobilenet": {"Conv", "BatchNormalization", "HardSwish", "HardSigmoid", "GlobalAveragePool", "Mul"},
    "efficientnet": {"Conv", "BatchNormalization", "Sigmoid", "Mul", "GlobalAveragePool", "Add", "Gemm"},
    "textbook": {"Identity", "Dropout", "Pad", "Transpose", "Cast", "Conv", "BatchNormalization",
                 "Relu", "MatMul", "Add", "Mul", "Shape", "Reshape"},
}
HAS_BATCHNORM = ("resnet_ts", "resnet_dynamo", "mobilenet", "efficientnet", "textbook")


def _proto(name: str) -> onnx.ModelProto:
    return samples.load_sample(name).proto


def _ops(model: onnx.ModelProto) -> Counter:
    return Counter(n.op_type for n in model.graph.node)


def _session(name: str) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    return ort.InferenceSession(str(samples.sample_path(name)), so, providers=["CPUExecutionProvider"])


# ------------------------------------------------------------------------------------ catalog


def test_catalog_lists_every_required_sample():
    assert set(NAMES) == EXPECTED
    assert len(NAMES) == len(set(NAMES))
    assert samples.sample_names() == NAMES  # every listed file exists


@pytest.mark.parametrize("entry", INDEX, ids=NAMES)
def test_catalog_entry_is_complete(entry):
    assert entry["file"] == f"{entry['name']}.onnx"
    assert entry["title"].strip() and entry["description"].strip()
    assert "\n" not in entry["description"]
    assert entry["shows"] and all(isinstance(s, str) and s for s in entry["shows"])


def test_total_size_is_small():
    total = sum((SAMPLE_DIR / e["file"]).stat().st_size for e in INDEX)
    assert total < MAX_TOTAL_BYTES


# ------------------------------------------------------------------------------------ every sample


@pytest.mark.parametrize("name", NAMES)
def test_sample_loads_and_is_small(name):
    path = SAMPLE_DIR / f"{name}.onnx"
    assert path.stat().st_size < MAX_BYTES
    loaded = model_io.load_path(path)
    assert loaded.size_bytes == path.stat().st_size
    assert not any(t.data_location == onnx.TensorProto.EXTERNAL for t in loaded.proto.graph.initializer)
    assert not list(SAMPLE_DIR.glob(f"{name}.onnx.data"))


@pytest.mark.parametrize("name", NAMES)
def test_sample_runs_in_onnxruntime(name):
    model = _proto(name)
    feeds = inputs.make_inputs(model)
    outs = _session(name).run(None, feeds)
    assert len(outs) == len(model.graph.output)
    for out in outs:
        assert np.all(np.isfinite(out))
        assert float(np.std(out)) > 1e-3  # numerically meaningful, not a constant


@pytest.mark.parametrize("name", NAMES)
def test_sample_has_required_ops(name):
    ops = _ops(_proto(name))
    missing = REQUIRED_OPS[name] - set(ops)
    assert not missing, f"{name} lacks {sorted(missing)}"


@pytest.mark.parametrize("name", NAMES)
def test_cli_info_works(name, capsys):
    assert cli.main(["info", name]) == 0
    out = capsys.readouterr().out
    assert f"{name}.onnx" in out


# ------------------------------------------------------------------------------------ BatchNorm


@pytest.mark.parametrize("name", HAS_BATCHNORM)
def test_batchnorm_is_inference_mode_with_nontrivial_statistics(name):
    model = _proto(name)
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    bns = [n for n in model.graph.node if n.op_type == "BatchNormalization"]
    assert bns
    for bn in bns:
        attrs = {a.name: helper.get_attribute_value(a) for a in bn.attribute}
        assert attrs.get("training_mode", 0) == 0
        assert len([o for o in bn.output if o]) == 1
        gamma, beta, mean, var = (weights[i] for i in bn.input[1:5])
        assert not np.allclose(mean, 0.0), bn.name
        assert not np.allclose(var, 1.0), bn.name
        assert not np.allclose(gamma, 1.0), bn.name
        assert not np.allclose(beta, 0.0), bn.name
        assert np.all(var > 0)


def test_dynamo_resnet_bias_blocks_feed_conv():
    """The CastLike/Expand zero-bias blocks are what stop simple BatchNorm folding."""
    model = _proto("resnet_dynamo")
    producer = {o: n for n in model.graph.node for o in n.output}
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    for conv in convs:
        assert len(conv.input) == 3
        bias = producer[conv.input[2]]
        assert bias.op_type == "Expand"
        assert producer[bias.input[0]].op_type == "CastLike"


# ------------------------------------------------------------------------------------ siblings


def test_resnet_exports_share_weights_and_outputs():
    ts, dyn = _proto("resnet_ts"), _proto("resnet_dynamo")

    def digests(model):
        return sorted(hashlib.sha256(numpy_helper.to_array(t).tobytes()).hexdigest()
                      for t in model.graph.initializer if t.dims and np.prod(t.dims) > 1)

    assert set(digests(ts)) <= set(digests(dyn))
    feeds = inputs.make_inputs(ts)
    a = _session("resnet_ts").run(None, feeds)[0]
    b = _session("resnet_dynamo").run(None, feeds)[0]
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["bert_ts", "bert_dynamo"])
def test_bert_inputs_are_dynamic(name):
    model = _proto(name)
    ins = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
           for i in model.graph.input}
    assert ins == {"input_ids": ["batch", "seq"], "attention_mask": ["batch", "seq"]}
    for i in model.graph.input:
        assert i.type.tensor_type.elem_type == onnx.TensorProto.INT64
    assert [o.name for o in model.graph.output] == ["last_hidden_state"]


@pytest.mark.parametrize("seq", [32, 128], ids=["seq32", "seq128"])
def test_bert_exports_agree_and_mask_matters(seq):
    rng = np.random.default_rng(seq)
    ids = rng.integers(0, 1000, (2, seq)).astype(np.int64)
    mask = np.ones((2, seq), np.int64)
    masked = mask.copy()
    masked[1, seq // 2:] = 0
    ts, dyn = _session("bert_ts"), _session("bert_dynamo")
    a = ts.run(None, {"input_ids": ids, "attention_mask": masked})[0]
    b = dyn.run(None, {"input_ids": ids, "attention_mask": masked})[0]
    assert a.shape == (2, seq, 128)
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    full = ts.run(None, {"input_ids": ids, "attention_mask": mask})[0]
    np.testing.assert_allclose(full[0], a[0], rtol=1e-5, atol=1e-5)  # row 0 unmasked in both
    assert np.abs(full[1, : seq // 2] - a[1, : seq // 2]).max() > 1e-3  # masking changes row 1


# ------------------------------------------------------------------------------------ textbook


def _textbook_graph():
    model = _proto("textbook")
    g = model.graph
    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    for n in g.node:
        if n.op_type == "Constant":
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    producer = {o: n for n in g.node for o in n.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    return model, consts, producer, consumers


def _is_scalar(consts, name, value) -> bool:
    return name in consts and consts[name].size == 1 and float(consts[name].reshape(())) == value


def test_textbook_opportunities_are_all_present():
    model, consts, producer, consumers = _textbook_graph()
    g = model.graph
    nodes = list(g.node)
    outputs = {o.name for o in g.output}
    typed = {vi.name: vi.type.tensor_type.elem_type for vi in list(g.input) + list(g.value_info)}

    # Dropout in inference form with an explicit ratio input (opset 13+)
    drops = [n for n in nodes if n.op_type == "Dropout"]
    assert drops and len(drops[0].input) >= 2 and drops[0].input[1] in consts
    # zero constant Pad feeding Conv
    pad = next(n for n in nodes if n.op_type == "Pad")
    assert consumers[pad.output[0]][0].op_type == "Conv"
    assert len(pad.input) < 3 or _is_scalar(consts, pad.input[2], 0.0)
    # inverse Transpose pair
    t2 = next(n for n in nodes if n.op_type == "Transpose" and producer.get(n.input[0]) is not None
              and producer[n.input[0]].op_type == "Transpose")
    p1 = helper.get_attribute_value(producer[t2.input[0]].attribute[0])
    p2 = helper.get_attribute_value(t2.attribute[0])
    assert [p1[i] for i in p2] == list(range(len(p1)))
    # dead branch: a node whose outputs nobody reads
    assert any(all(o not in consumers and o not in outputs for o in n.output) for n in nodes)
    # duplicate subexpression: same op, same inputs, same attributes, twice
    keys = Counter((n.op_type, tuple(n.input), tuple(a.SerializeToString() for a in n.attribute))
                   for n in nodes if n.op_type != "Constant")
    assert max(keys.values()) >= 2
    # constant subgraph: a non-Constant node whose inputs are all constants
    assert any(n.op_type not in ("Constant",) and n.input and all(i in consts for i in n.input)
               for n in nodes)
    # shape arithmetic feeding a Reshape
    reshape = next(n for n in nodes if n.op_type == "Reshape")
    assert producer[reshape.input[1]].op_type == "Concat"
    # 2-D MatMul followed by a bias Add
    mm = next(n for n in nodes if n.op_type == "MatMul")
    assert consumers[mm.output[0]][0].op_type == "Add"
    # x*1 and x+0
    assert any(n.op_type == "Mul" and any(_is_scalar(consts, i, 1.0) for i in n.input) for n in nodes)
    assert any(n.op_type == "Add" and any(_is_scalar(consts, i, 0.0) for i in n.input) for n in nodes)
    # Cast to the type it already has
    cast = next(n for n in nodes if n.op_type == "Cast")
    src = producer[cast.input[0]].input[0] if cast.input[0] in producer else cast.input[0]
    assert helper.get_attribute_value(cast.attribute[0]) == typed[src]
    # Conv -> BatchNormalization -> Relu
    bn = next(n for n in nodes if n.op_type == "BatchNormalization")
    assert producer[bn.input[0]].op_type == "Conv"
    assert consumers[bn.output[0]][0].op_type == "Relu"


def _load_script():
    path = SAMPLE_DIR / "make_samples.py"
    spec = importlib.util.spec_from_file_location("fusionviz_make_samples", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve string annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_textbook_matches_numpy_reference():
    script = _load_script()
    model = _proto("textbook")
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    got = _session("textbook").run(None, {"input": x})[0]
    np.testing.assert_allclose(got, script.textbook_reference(x, model), rtol=1e-4, atol=1e-5)


def test_textbook_regenerates_byte_identical(tmp_path):
    script = _load_script()
    script.build_textbook(tmp_path / "textbook.onnx")
    assert (tmp_path / "textbook.onnx").read_bytes() == (SAMPLE_DIR / "textbook.onnx").read_bytes()


@pytest.mark.slow
def test_torch_samples_regenerate_byte_identical(tmp_path):
    torch = pytest.importorskip("torch", reason="torch is a dev-only tool for make_samples.py")
    if not torch.__version__.startswith("2.13."):
        pytest.skip(f"samples were made with torch 2.13; found {torch.__version__}")
    # As `make samples` runs it: a fresh process (the dynamo exporter records module names).
    proc = subprocess.run([sys.executable, str(SAMPLE_DIR / "make_samples.py"), "--out", str(tmp_path),
                           "--no-check"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name in NAMES:
        new = (tmp_path / f"{name}.onnx").read_bytes()
        assert new == (SAMPLE_DIR / f"{name}.onnx").read_bytes(), f"{name} differs from a fresh export"
    assert (tmp_path / "samples.json").read_text() == (SAMPLE_DIR / "samples.json").read_text()


def test_index_matches_script_specs():
    script = _load_script()
    assert [s.name for s in script.SAMPLES] == NAMES
    assert Path(SAMPLE_DIR / "samples.json").read_text() == (
        json.dumps([{"name": s.name, "file": f"{s.name}.onnx", "title": s.title,
                     "description": s.description, "shows": list(s.shows),
                     "made_with": s.made_with, "must_have": list(s.must_have)}
                    for s in script.SAMPLES], indent=2) + "\n")
