"""Fuzzing the loader and the pass pipeline.

Hypothesis mutates small valid models (byte flips, truncation, dropped fields, changed dims,
rewired inputs, changed op types, changed opsets) and checks the contract:
``model_io.load_bytes`` and then ``run_pipeline(model, default_passes())`` either succeed or
raise :class:`FusionvizError`; nothing else escapes, and no example runs longer than
``EXAMPLE_BOUND_S`` (enforced with a timer signal, so a hang fails instead of blocking CI).

A pass that hits an internal error is isolated by the pipeline (``PassReport.error``), so the
user loses nothing, but it is a bug in the pass: the example fails (Hypothesis then shrinks it
to the smallest mutation that still breaks the pass).

Deterministic: ``derandomize=True`` and no example database, so CI sees the same examples
(250 per property, ~10 s). For a longer randomized hunt:
``FUSIONVIZ_FUZZ_RANDOM=1 FUSIONVIZ_FUZZ_EXAMPLES=3000 pytest tests/hostile/test_fuzz.py``.
"""

from __future__ import annotations

import os
import re
import signal
import time

import numpy as np
import onnx
import onnx.parser
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from fusionviz import errors, model_io, samples
from fusionviz.passes import registry, run_pipeline

from .corpus import nested_if_model, tiny_model

EXAMPLE_BOUND_S = 30.0
INTERNAL = re.compile(r"^[A-Z]\w*(Error|Exception|Exit)\b")


def _conv_bn_relu() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
        numpy_helper.from_array(rng.uniform(0.5, 2, 4).astype(np.float32), "gamma"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "beta"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "mean"),
        numpy_helper.from_array(rng.uniform(0.5, 2, 4).astype(np.float32), "var"),
        numpy_helper.from_array(np.array([[0, 0, 1, 1, 0, 0, 1, 1]], np.int64).reshape(8), "pads"),
    ]
    nodes = [
        helper.make_node("Pad", ["x", "pads"], ["p"], name="pad"),
        helper.make_node("Conv", ["p", "w", "b"], ["c"], name="conv"),
        helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["n"], name="bn"),
        helper.make_node("Relu", ["n"], ["r"], name="relu"),
        helper.make_node("Identity", ["r"], ["i"], name="ident"),
        helper.make_node("Transpose", ["i"], ["t1"], perm=[0, 2, 3, 1], name="t1"),
        helper.make_node("Transpose", ["t1"], ["y"], perm=[0, 3, 1, 2], name="t2"),
    ]
    g = helper.make_graph(nodes, "cbr", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _matmul_block() -> onnx.ModelProto:
    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        mm (float[batch, 4, 8] x) => (float[batch, 4, 8] y) {
            m = MatMul(x, W)
            a = Add(m, B)
            one = Constant<value = float {1.0}>()
            s = Mul(a, one)
            d = Div(s, one)
            e = Erf(d)
            ln = LayerNormalization<axis = -1>(e, G, B)
            c = Cast<to = 1>(ln)
            y = Softmax<axis = -1>(c)
        }
    """)
    rng = np.random.default_rng(1)
    model.graph.initializer.extend([
        numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "B"),
        numpy_helper.from_array(np.ones(8, np.float32), "G"),
    ])
    return model


def _seeds() -> list[bytes]:
    models = [tiny_model(), _conv_bn_relu(), _matmul_block(), nested_if_model(3)]
    if "textbook" in samples.sample_names():
        models.append(samples.load_sample("textbook").proto)
    for m in models:
        onnx.checker.check_model(m)
    return [m.SerializeToString() for m in models]


SEEDS = _seeds()
OP_TYPES = ["Relu", "Add", "Conv", "MatMul", "Gemm", "BatchNormalization", "Identity", "Dropout",
            "Transpose", "Reshape", "Cast", "If", "Loop", "Constant", "Frobnicate", "Softmax", "Pad"]
DIMS = [0, 1, 3, -1, -(2**40), 2**31, 2**40, 2**62]


# --------------------------------------------------------------------------- mutations


def _names(m: onnx.ModelProto) -> list[str]:
    out = [i.name for i in m.graph.input] + [t.name for t in m.graph.initializer]
    out += [o for n in m.graph.node for o in n.output]
    return out or ["x"]


def _apply(m: onnx.ModelProto, op: tuple, draw) -> None:
    g = m.graph
    kind = op[0]
    if kind == "drop_node" and g.node:
        del g.node[op[1] % len(g.node)]
    elif kind == "drop_initializer" and g.initializer:
        del g.initializer[op[1] % len(g.initializer)]
    elif kind == "drop_input" and g.input:
        del g.input[op[1] % len(g.input)]
    elif kind == "drop_output" and g.output:
        del g.output[op[1] % len(g.output)]
    elif kind == "drop_attribute":
        nodes = [n for n in g.node if n.attribute]
        if nodes:
            n = nodes[op[1] % len(nodes)]
            del n.attribute[op[2] % len(n.attribute)]
    elif kind == "drop_opset":
        del m.opset_import[:]
    elif kind == "drop_data" and g.initializer:
        t = g.initializer[op[1] % len(g.initializer)]
        t.ClearField("raw_data")
        t.ClearField("float_data")
        t.ClearField("int64_data")
    elif kind == "dims":
        targets = [vi.type.tensor_type.shape for vi in list(g.input) + list(g.output)
                   if vi.type.tensor_type.HasField("shape")]
        targets += [t for t in g.initializer]
        if targets:
            t = targets[op[1] % len(targets)]
            dims = t.dim if hasattr(t, "dim") else None
            if dims is not None and len(dims):
                dims[op[2] % len(dims)].dim_value = op[3]
            elif isinstance(t, TensorProto) and len(t.dims):
                t.dims[op[2] % len(t.dims)] = op[3]
    elif kind == "rewire" and g.node:
        n = g.node[op[1] % len(g.node)]
        names = _names(m) + ["", "ghost", n.output[0] if n.output else "y"]
        if n.input:
            n.input[op[2] % len(n.input)] = names[op[3] % len(names)]
    elif kind == "op_type" and g.node:
        g.node[op[1] % len(g.node)].op_type = OP_TYPES[op[2] % len(OP_TYPES)]
    elif kind == "opset" and m.opset_import:
        m.opset_import[0].version = op[1]
    elif kind == "ir_version":
        m.ir_version = op[1]
    elif kind == "values" and g.initializer:
        t = g.initializer[op[1] % len(g.initializer)]
        try:
            arr = numpy_helper.to_array(t).copy()
        except ValueError:  # an earlier mutation already broke this tensor
            return
        if t.data_type == TensorProto.FLOAT and arr.size:
            arr.flat[op[2] % arr.size] = op[3]
            t.CopyFrom(numpy_helper.from_array(arr.astype(np.float32), t.name))
    elif kind == "attr_int":
        attrs = [a for n in g.node for a in n.attribute
                 if a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.INTS)]
        if attrs:
            a = attrs[op[1] % len(attrs)]
            if a.type == onnx.AttributeProto.INT:
                a.i = op[2]
            elif len(a.ints):
                a.ints[op[1] % len(a.ints)] = op[2]
    elif kind == "dim_param":
        shapes = [vi.type.tensor_type.shape for vi in g.input if vi.type.tensor_type.HasField("shape")]
        if shapes and len(shapes[0].dim):
            shapes[0].dim[op[1] % len(shapes[0].dim)].dim_param = "N"
    elif kind == "swap_nodes" and len(g.node) > 1:
        i, j = op[1] % len(g.node), op[2] % len(g.node)
        a, b = onnx.NodeProto(), onnx.NodeProto()
        a.CopyFrom(g.node[i])
        b.CopyFrom(g.node[j])
        g.node[i].CopyFrom(b)
        g.node[j].CopyFrom(a)


_idx = st.integers(0, 50)
STRUCT = st.one_of(
    st.tuples(st.sampled_from(["drop_node", "drop_initializer", "drop_input", "drop_output",
                               "drop_data", "drop_opset"]), _idx),
    st.tuples(st.just("drop_attribute"), _idx, _idx),
    st.tuples(st.just("dims"), _idx, _idx, st.sampled_from(DIMS)),
    st.tuples(st.just("rewire"), _idx, _idx, _idx),
    st.tuples(st.just("op_type"), _idx, _idx),
    st.tuples(st.just("opset"), st.sampled_from([0, 1, 6, 7, 13, 17, 21, 28, 29, 10**6])),
    st.tuples(st.just("ir_version"), st.sampled_from([0, 2, 3, 7, 10, 14, 15, 99])),
    st.tuples(st.just("swap_nodes"), _idx, _idx),
    # mutations that usually keep the model valid, so they reach the passes with odd content
    st.tuples(st.just("values"), _idx, _idx,
              st.sampled_from([float("nan"), float("inf"), -float("inf"), 0.0, 1e-40, -1e30])),
    st.tuples(st.just("attr_int"), _idx, st.sampled_from([-5, -1, 0, 1, 2, 3, 7, 2**31 - 1])),
    st.tuples(st.just("dim_param"), _idx),
)
BYTES = st.one_of(
    st.tuples(st.just("flip"), st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)),
                                        min_size=1, max_size=8)),
    st.tuples(st.just("truncate"), st.floats(0.0, 1.0)),
    st.tuples(st.just("splice"), st.integers(0, 10**6), st.binary(min_size=1, max_size=16)),
)


def _mutate(seed: bytes, struct_ops: list, byte_ops: list) -> bytes:
    m = onnx.ModelProto()
    m.ParseFromString(seed)
    for op in struct_ops:
        _apply(m, op, None)
    try:
        data = bytearray(m.SerializeToString())
    except Exception:  # noqa: BLE001 - an impossible proto: fall back to the seed's bytes
        data = bytearray(seed)
    for op in byte_ops:
        if not data:
            break
        if op[0] == "flip":
            for pos, xor in op[1]:
                data[pos % len(data)] ^= xor
        elif op[0] == "truncate":
            data = data[: int(len(data) * op[1])]
        else:
            pos = op[1] % len(data)
            data[pos:pos] = op[2]
    return bytes(data)


# --------------------------------------------------------------------------- the property


class _Hang(Exception):
    pass


def _alarm(signum, frame):  # noqa: ARG001
    raise _Hang(f"example ran past {EXAMPLE_BOUND_S:.0f} s")


OUTCOMES: dict[str, int] = {}


def _check(data: bytes, how: str) -> None:
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, EXAMPLE_BOUND_S)
    t0 = time.perf_counter()
    try:
        try:
            loaded = model_io.load_bytes(data, name="fuzz.onnx")
        except errors.FusionvizError as exc:
            assert str(exc) and "\n" not in str(exc)
            OUTCOMES["refused by loader"] = OUTCOMES.get("refused by loader", 0) + 1
            return
        try:
            result = run_pipeline(loaded.proto, registry.default_passes())
        except errors.FusionvizError:
            OUTCOMES["refused by pipeline"] = OUTCOMES.get("refused by pipeline", 0) + 1
            return
        OUTCOMES["pipeline ran"] = OUTCOMES.get("pipeline ran", 0) + 1
        internal = [f"{r.name}: {r.error[:300]}" for r in result.reports if r.error and INTERNAL.match(r.error)]
        assert not internal, f"pass internal error on a model from {how}: {internal}"
        assert result.final.graph is not None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert time.perf_counter() - t0 < EXAMPLE_BOUND_S


# FUSIONVIZ_FUZZ_EXAMPLES / FUSIONVIZ_FUZZ_RANDOM=1 allow a longer, randomized hunt by hand.
FUZZ = settings(max_examples=int(os.environ.get("FUSIONVIZ_FUZZ_EXAMPLES", "250")), deadline=None,
                derandomize=not os.environ.get("FUSIONVIZ_FUZZ_RANDOM"), database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
                print_blob=True)


@FUZZ
@given(seed=st.sampled_from(range(len(SEEDS))), struct_ops=st.lists(STRUCT, min_size=1, max_size=3))
def test_structural_mutations_load_or_fail_cleanly(seed, struct_ops):
    _check(_mutate(SEEDS[seed], struct_ops, []), f"seed {seed} + {struct_ops}")


@FUZZ
@given(seed=st.sampled_from(range(len(SEEDS))), struct_ops=st.lists(STRUCT, max_size=1),
       byte_ops=st.lists(BYTES, min_size=1, max_size=3))
def test_byte_mutations_load_or_fail_cleanly(seed, struct_ops, byte_ops):
    _check(_mutate(SEEDS[seed], struct_ops, byte_ops), f"seed {seed} + {struct_ops} + {byte_ops}")


def test_fuzz_reached_the_passes():
    # Runs after the two properties (file order): the fuzzing must not be vacuous, i.e. some
    # mutated models got past the loader into the passes, and some were refused.
    if not OUTCOMES:
        pytest.skip("run together with the fuzz properties")
    assert OUTCOMES.get("pipeline ran", 0) >= 5, OUTCOMES
    assert OUTCOMES.get("refused by loader", 0) >= 5, OUTCOMES
