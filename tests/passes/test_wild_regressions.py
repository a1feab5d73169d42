"""Regressions from real third-party models (Paddle OCR, Silero VAD, onnx's light models, ...).

Each test is the smallest ONNX-text model that shows one root cause found on a real export,
named for what must not happen. Every result must pass ``onnx.checker`` (full check), load in
onnxruntime, keep the graph's inputs and outputs, and give the original's outputs on random
normal inputs *and* on all-zeros inputs, with no new NaN or Inf. The pipeline's own validity
rule (which would roll a bad pass back) is switched off: these tests look at the passes.
"""

from __future__ import annotations

import inspect
import os

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort
import pytest

from fusionviz.passes import registry
from fusionviz.passes.pipeline import run_pipeline

RTOL, ATOL = 1e-4, 1e-5
_NP = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.INT64: np.int64, onnx.TensorProto.BOOL: np.bool_,
       onnx.TensorProto.FLOAT16: np.float16}
_EXACT = registry.default_passes()


# --------------------------------------------------------------------------- helpers


def parse(text: str) -> onnx.ModelProto:
    model = onnx.parser.parse_model(text)
    onnx.checker.check_model(model, full_check=True)
    return model


def passes(model: onnx.ModelProto, *names: str, shapes=None):
    """Run ``names`` (every exact pass for "all") without the pipeline's validity rollback."""
    wanted = _EXACT if names == ("all",) else list(names)
    result = run_pipeline(model, wanted, shapes=shapes, validate=False)
    errors = [(r.name, r.error) for r in result.reports if r.error]
    assert not errors, errors
    return result


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def feeds(model: onnx.ModelProto, *, zeros: bool, fixed: dict | None = None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    inits = {t.name for t in model.graph.initializer}
    out = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        if fixed and vi.name in fixed:
            out[vi.name] = fixed[vi.name]
            continue
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim]
        dt = _NP[tt.elem_type]
        if zeros:
            out[vi.name] = np.zeros(dims, dt)
        elif dt == np.bool_:
            out[vi.name] = rng.integers(0, 2, dims).astype(bool)
        elif np.issubdtype(dt, np.integer):
            out[vi.name] = rng.integers(0, 3, dims).astype(dt)
        else:
            out[vi.name] = rng.standard_normal(dims).astype(dt)
    return out


def io(model: onnx.ModelProto):
    inits = {t.name for t in model.graph.initializer}

    def sig(vs):
        return [(v.name, v.type.tensor_type.elem_type, len(v.type.tensor_type.shape.dim)) for v in vs
                if v.name not in inits]

    return sig(model.graph.input), sig(model.graph.output)


def assert_valid(original: onnx.ModelProto, final: onnx.ModelProto) -> ort.InferenceSession:
    onnx.checker.check_model(final, full_check=True)
    assert io(final) == io(original)
    return session(final)


def assert_same(original: onnx.ModelProto, final: onnx.ModelProto, *, fixed: dict | None = None,
                rtol: float = RTOL, atol: float = ATOL) -> None:
    """Valid, and equal outputs on random and all-zeros inputs, without new NaN/Inf."""
    got_session = assert_valid(original, final)
    ref_session = session(original)
    for zeros in (False, True):
        f = feeds(original, zeros=zeros, fixed=fixed)
        names = [o.name for o in ref_session.get_outputs()]
        ref = dict(zip(names, ref_session.run(None, f), strict=True))
        got = dict(zip([o.name for o in got_session.get_outputs()], got_session.run(None, f), strict=True))
        for name, b in ref.items():
            a = got[name]
            assert a.shape == b.shape, name
            b64, a64 = b.astype(np.float64), a.astype(np.float64)
            new_bad = ~np.isfinite(a64) & np.isfinite(b64)
            assert not new_bad.any(), f"{name}: new NaN/Inf on {'zeros' if zeros else 'random'} input"
            fin = np.isfinite(b64)
            assert np.all(np.abs(a64 - b64)[fin] <= atol + rtol * np.abs(b64)[fin]), (name, zeros)


def ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def all_ops(graph: onnx.GraphProto) -> list[str]:
    out = []
    for n in graph.node:
        out.append(n.op_type)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                out += all_ops(a.g)
    return out


def constants(model: onnx.ModelProto) -> list[np.ndarray]:
    """Every float constant (initializers and Constant nodes) of the main graph."""
    out = [onnx.numpy_helper.to_array(t) for t in model.graph.initializer]
    out += [onnx.numpy_helper.to_array(n.attribute[0].t) for n in model.graph.node
            if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"]
    return [a for a in out if a.dtype.kind == "f"]


# --------------------------------------------------------------------------- 1. epsilons


def _eps_model(consumer: str, eps: str = "1e-10") -> onnx.ModelProto:
    body = {
        "Log": "y = Log (s)",
        "Sqrt": "y = Sqrt (s)",
        "Div": "one = Constant <value = float {1.0}> ()\n  y = Div (one, s)",
        "Pow": "p = Constant <value = float {-0.5}> ()\n  y = Pow (s, p)",
    }[consumer]
    return parse(f"""
<ir_version: 8, opset_import: ["": 17]>
g (float[2,8] x) => (float[2,8] y) {{
  a = Abs (x)
  e = Constant <value = float {{{eps}}}> ()
  s = Add (a, e)
  {body}
}}""")


@pytest.mark.parametrize("consumer", ["Log", "Sqrt", "Div", "Pow"])
@pytest.mark.parametrize("pass_name", [*_EXACT, "all"])
def test_no_exact_pass_removes_epsilon_before_singular_op(pass_name, consumer):
    model = _eps_model(consumer)
    result = passes(model, pass_name)
    assert any(np.any(c == np.float32(1e-10)) for c in constants(result.final)), "the epsilon is gone"
    assert_same(result.original, result.final)


def test_noop_elimination_keeps_epsilon_add_before_log():
    # onnxscript's add_0 rule matches any constant within 1e-8 of 0
    model = _eps_model("Log")
    result = passes(model, "eliminate_noop")
    assert "Add" in ops(result.final)
    assert_same(result.original, result.final)


@pytest.mark.parametrize("consumer", ["Log", "Sqrt", "Div", "Pow"])
def test_fp16_never_turns_epsilon_into_inf_on_zero_input(consumer):
    model = _eps_model(consumer)
    result = passes(model, "fp16")
    assert any(n.op_type == "Cast" for n in result.final.graph.node), "fp16 did not run"
    sess = assert_valid(result.original, result.final)
    zeros = feeds(model, zeros=True)
    ref = session(model).run(None, zeros)[0]
    got = sess.run(None, zeros)[0]
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, ref, rtol=1e-3)  # the guarded path stays fp32


@pytest.mark.parametrize("consumer", ["Log", "Sqrt", "Div", "Pow"])
@pytest.mark.parametrize("pass_name", ["int8_dynamic", "int8_static"])
def test_int8_never_quantizes_epsilon_away(pass_name, consumer):
    # QDQ around the Add rounds x + 1e-10 to the activation's step: 0 where x is 0
    model = _eps_model(consumer)
    result = passes(model, pass_name)
    sess = assert_valid(result.original, result.final)
    assert np.all(np.isfinite(sess.run(None, feeds(model, zeros=True))[0]))


def test_fp16_keeps_constant_beyond_fp16_range_exact():
    # 1e5 does not fit fp16 (max 65504); the converter would clamp the divisor to 65504
    model = parse("""
<ir_version: 8, opset_import: ["": 17]>
g (float[2,8] x) => (float[2,8] y) {
  d = Constant <value = float {100000.0}> ()
  y = Div (x, d)
}""")
    result = passes(model, "fp16")
    sess = assert_valid(result.original, result.final)
    f = feeds(model, zeros=False)
    np.testing.assert_allclose(sess.run(None, f)[0], session(model).run(None, f)[0], rtol=1e-3)


def _denormal_eps_model() -> onnx.ModelProto:
    return parse("""
<ir_version: 8, opset_import: ["": 17]>
g (float[2,8] x) => (float[2,8] y) <float eps = {1e-40}> {
  a = Abs (x)
  s = Add (a, eps)
  y = Log (s)
}""")


def test_denormal_flush_keeps_denormal_epsilon_before_log():
    model = _denormal_eps_model()
    result = passes(model, "denormal_flush")
    eps = next(t for t in result.final.graph.initializer if t.name == "eps")
    assert onnx.numpy_helper.to_array(eps) != 0
    assert_same(result.original, result.final)


def test_denormal_flush_never_zeroes_fp16_subnormal_weights():
    # an fp16 speech model: its weights below 6.1e-05 are fp16 subnormals but ordinary numbers
    # in the fp32 arithmetic onnxruntime's CPU kernels use; zeroing them moved outputs by 2 %
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 8)).astype(np.float16)
    w.reshape(-1)[:6] = np.float16(3e-5)  # fp16 subnormals among ordinary weights
    model = onnx.parser.parse_model("""
<ir_version: 8, opset_import: ["": 17]>
g (float16[4,16] x) => (float16[4,8] y) {
  y = MatMul (x, w)
}""")
    model.graph.initializer.append(onnx.numpy_helper.from_array(w, "w"))
    onnx.checker.check_model(model, full_check=True)
    result = passes(model, "denormal_flush")
    w_after = next(onnx.numpy_helper.to_array(t) for t in result.final.graph.initializer if t.name == "w")
    np.testing.assert_array_equal(w_after, w)


def test_fp16_then_denormal_flush_keeps_layernorm_epsilon():
    # var + 1e-5 before Sqrt: 1e-5 is an fp16 subnormal; flushing it divides by zero on zeros
    model = parse("""
<ir_version: 8, opset_import: ["": 18]>
g (float[2,8] x) => (float[2,8] y) {
  ax = Constant <value = int64[1] {-1}> ()
  m = ReduceMean (x, ax)
  d = Sub (x, m)
  sq = Mul (d, d)
  v = ReduceMean (sq, ax)
  e = Constant <value = float {1e-5}> ()
  ve = Add (v, e)
  sd = Sqrt (ve)
  y = Div (d, sd)
}""")
    result = passes(model, "fp16", "denormal_flush")
    sess = assert_valid(result.original, result.final)
    got = sess.run(None, feeds(model, zeros=True))[0]
    assert np.all(np.isfinite(got))


# --------------------------------------------------------------------------- 2. If folding


def test_constant_folding_if_branch_keeps_outer_values_connected():
    model = parse("""
<ir_version: 8, opset_import: ["": 17]>
g (float[2,4] x) => (float[2,4] y) {
  r = Relu (x)
  c = Constant <value = bool {1}> ()
  y = If (c) <
    then_branch = t () => (float[2,4] o) { o = Add (r, x) },
    else_branch = e () => (float[2,4] o2) { o2 = Sub (r, x) }
  >
}""")
    result = passes(model, "fold_constants")
    assert "If" not in all_ops(result.final.graph)
    assert result.final.graph.output[0].name == "y"
    assert_same(result.original, result.final)


def test_constant_folding_if_returning_outer_value_keeps_both_names():
    # the taken branch returns the graph input itself: renaming it would rename the input
    model = parse("""
<ir_version: 8, opset_import: ["": 17]>
g (float[2,4] x) => (float[2,4] y, float[2,4] z) {
  c = Constant <value = bool {0}> ()
  y = If (c) <
    then_branch = t () => (float[2,4] o) { o = Neg (x) },
    else_branch = e () => (float[2,4] o2) { o2 = Identity (x) }
  >
  z = Relu (y)
}""")
    result = passes(model, "fold_constants")
    assert "If" not in all_ops(result.final.graph)
    assert [v.name for v in result.final.graph.input] == ["x"]
    assert_same(result.original, result.final)


def test_constant_folding_if_branch_names_never_shadow_sibling_branch_names():
    # both Ifs' branches define "t"; the folded one moves "t" into the main graph, where the
    # other If's branch would then redefine it
    model = parse("""
<ir_version: 8, opset_import: ["": 17]>
g (float[2,4] x, bool k) => (float[2,4] y, float[2,4] z) {
  c = Constant <value = bool {1}> ()
  y = If (c) <
    then_branch = a () => (float[2,4] o) { t = Relu (x)  o = Neg (t) },
    else_branch = b () => (float[2,4] o2) { o2 = Identity (x) }
  >
  z = If (k) <
    then_branch = c1 () => (float[2,4] p) { t = Sigmoid (x)  p = Neg (t) },
    else_branch = d1 () => (float[2,4] p2) { p2 = Abs (x) }
  >
}""")
    result = passes(model, "fold_constants")
    assert ops(result.final).count("If") == 1
    assert_same(result.original, result.final, fixed={"k": np.array(True)})


def test_constant_folding_keeps_if_whose_branch_contradicts_its_output_shape():
    # the taken branch makes a rank-3 tensor where the If declares rank 2: its consumers were
    # checked against rank 2, so the If stays
    model = parse("""
<ir_version: 8, opset_import: ["": 17]>
g (float[4] x) => (float[4] y) {
  c = Constant <value = bool {1}> ()
  ax = Constant <value = int64[1] {0}> ()
  u = If (c) <
    then_branch = t () => (float[1,1,4] o) { o1 = Unsqueeze (x, ax)  o = Unsqueeze (o1, ax) },
    else_branch = e () => (float[1,4] o2) { o2 = Unsqueeze (x, ax) }
  >
  shp = Constant <value = int64[1] {4}> ()
  y = Reshape (u, shp)
}""")
    model.graph.value_info.append(onnx.helper.make_tensor_value_info("u", onnx.TensorProto.FLOAT, [None, None]))
    onnx.checker.check_model(model, full_check=True)
    result = passes(model, "fold_constants")
    assert "If" in ops(result.final)
    assert_same(result.original, result.final)


def test_constant_folding_never_leaves_a_dead_branch_that_fails_shape_inference():
    # silero-vad: the 8 kHz path (a branch on a run-time input) cannot run with 16 kHz frames;
    # while its shapes were unknown the checker accepted it. Folding inside it makes the Pad's
    # shape known, and the Squeeze of a size-6 axis fails inference: fold the main graph only.
    model = parse("""
<ir_version: 8, opset_import: ["": 17]>
g (float[1,4] x, bool k, bool k2) => (float[1,4] z) {
  z = If (k) <
    then_branch = t () => (float[1,4] o) { o = Neg (x) },
    else_branch = e () => (float[1,4] o2) {
      pf = Constant <value = float[4] {0, 1, 0, 1}> ()
      pc = Cast <to = 7> (pf)
      pi = Abs (pc)
      px = Pad (x, pi)
      q = If (k2) <
        then_branch = t2 () => (float[1,4] o3) {
          ax = Constant <value = int64[1] {1}> ()
          sq = Squeeze (px, ax)
          s4 = Constant <value = int64[2] {1, 4}> ()
          o3 = Reshape (sq, s4)
        },
        else_branch = e2 () => (float[1,4] o4) { o4 = Abs (x) }
      >
      o2 = Identity (q)
    }
  >
}""")
    result = passes(model, "fold_constants")
    for k in (True, False):
        assert_same(result.original, result.final, fixed={"k": np.array(k), "k2": np.array(False)})


# --------------------------------------------------------------------------- 3. renames


_BRANCH_USE = """
<ir_version: 8, opset_import: ["": 17]>
g (float[2,4] x, bool k) => (float[2,4] z) {{
  {producer}
  z = If (k) <
    then_branch = t () => (float[2,4] o) {{ o = Neg (v) }},
    else_branch = e () => (float[2,4] o2) {{ o2 = Abs (v) }}
  >
}}"""


@pytest.mark.parametrize(("pass_name", "producer"), [
    ("eliminate_identity", "r = Relu (x)\n  v = Identity (r)"),
    ("eliminate_noop", "r = Relu (x)\n  one = Constant <value = float {1.0}> ()\n  v = Mul (r, one)"),
    ("eliminate_common_subexpressions", "r = Relu (x)\n  r2 = Relu (x)\n  v = Add (r, r2)"),
    ("fold_chains", "t1 = Transpose <perm = [1, 0]> (x)\n  v = Transpose <perm = [1, 0]> (t1)"),
    ("eliminate_cast_expand", "v = Cast <to = 1> (x)"),
])
def test_rename_never_breaks_value_used_inside_if_branch(pass_name, producer):
    model = parse(_BRANCH_USE.format(producer=producer))
    result = passes(model, pass_name)
    assert result.reports[0].changes, f"{pass_name} did nothing"
    for k in (True, False):
        assert_same(result.original, result.final, fixed={"k": np.array(k)})


def test_identity_elimination_keeps_branch_output_identity_of_outer_value():
    # silero-vad: a branch returns Identity(outer value); the subgraph output must be made in it
    model = parse("""
<ir_version: 8, opset_import: ["": 17]>
g (float[2,4] x, bool k) => (float[2,4] z) {
  r = Relu (x)
  z = If (k) <
    then_branch = t () => (float[2,4] o) { o = Neg (r) },
    else_branch = e () => (float[2,4] o2) { o2 = Identity (r) }
  >
}""")
    result = passes(model, "eliminate_identity")
    for k in (True, False):
        assert_same(result.original, result.final, fixed={"k": np.array(k)})


def test_fusion_rewires_fused_value_used_inside_if_branch():
    model = parse("""
<ir_version: 8, opset_import: ["": 17]>
g (float[1,2,4,4] x, bool k) => (float[1,2,4,4] z) {
  w = Constant <value = float[2,2,1,1] {1, 0.5, -0.5, 1}> ()
  c = Conv (x, w)
  v = Relu (c)
  z = If (k) <
    then_branch = t () => (float[1,2,4,4] o) { o = Neg (v) },
    else_branch = e () => (float[1,2,4,4] o2) { o2 = Abs (v) }
  >
}""")
    result = passes(model, "fuse_conv_activation")
    assert "FusedConv" in ops(result.final)
    for k in (True, False):
        assert_same(result.original, result.final, fixed={"k": np.array(k)})


# --------------------------------------------------------------------------- 4. names


def _two_residual_layernorms(opset: int = 17) -> onnx.ModelProto:
    return parse(f"""
<ir_version: 8, opset_import: ["": {opset}]>
g (float[1,4,8] a, float[1,4,8] b) => (float[1,4,8] y) {{
  g1 = Constant <value = float[8] {{1,1,1,1,1,1,1,1}}> ()
  b1 = Constant <value = float[8] {{0,0,0,0,0,0,0,0}}> ()
  s1 = Add (a, b)
  n1 = LayerNormalization <axis = -1> (s1, g1, b1)
  s2 = Add (n1, s1)
  n2 = LayerNormalization <axis = -1> (s2, g1, b1)
  y = Add (n2, s2)
}}""")


def test_skip_layernorm_fusion_never_duplicates_unused_output_names():
    # two fusions whose sums are still needed: their unused outputs were both "_unused1"
    model = _two_residual_layernorms()
    result = passes(model, "fuse_skip_layernorm")
    assert ops(result.final).count("SkipLayerNormalization") == 2
    assert {o.domain: o.version for o in result.final.opset_import}.get("com.microsoft") == 1
    assert_same(result.original, result.final)


def test_skip_layernorm_fusion_declines_bias_of_other_length():
    model = parse("""
<ir_version: 8, opset_import: ["": 17]>
g (float[1,4,8] a, float[1,4,8] b) => (float[1,4,8] y) {
  g1 = Constant <value = float[8] {1,1,1,1,1,1,1,1}> ()
  bias = Constant <value = float[1] {0.5}> ()
  a2 = Add (a, bias)
  s = Add (a2, b)
  y = LayerNormalization <axis = -1> (s, g1)
}""")
    result = passes(model, "fuse_skip_layernorm")
    assert_same(result.original, result.final)


def test_generated_names_never_collide_with_existing_names():
    # values already named like the fusions' outputs, nodes with empty and "_fv"-style names
    model = _two_residual_layernorms()
    for node in model.graph.node:
        node.name = ""
    model.graph.node[0].name = "Add_fv1"
    taken = ["n1_skln", "s1_sum", "n2_skln", "_unused1", "_unused0"]
    for i, name in enumerate(taken):
        model.graph.node.append(onnx.helper.make_node("Identity", ["a"], [name], name=f"keep{i}"))
        model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, [1, 4, 8]))
    onnx.checker.check_model(model, full_check=True)
    result = passes(model, "fuse_skip_layernorm")
    assert ops(result.final).count("SkipLayerNormalization") == 2
    names = [n.name for n in result.final.graph.node]
    assert len(names) == len(set(names)) and all(names)
    assert_same(result.original, result.final)


def test_rewrite_value_names_never_shadow_names_of_enclosing_graph():
    # onnxscript names new values val_0, val_1, ... per graph: merging the Slices inside the
    # branch made Constants "val_0".. that the main graph already had
    model = parse("""
<ir_version: 8, opset_import: ["": 17]>
g (float[4,6] x, bool k) => (float[2,3] z, float[4,6] val_0, float[4,6] val_1) {
  val_0 = Relu (x)
  val_1 = Neg (x)
  z = If (k) <
    then_branch = t () => (float[2,3] o) {
      s0 = Constant <value = int64[1] {0}> ()
      e0 = Constant <value = int64[1] {2}> ()
      a0 = Constant <value = int64[1] {0}> ()
      s1 = Constant <value = int64[1] {1}> ()
      e1 = Constant <value = int64[1] {4}> ()
      a1 = Constant <value = int64[1] {1}> ()
      p = Slice (val_0, s0, e0, a0)
      o = Slice (p, s1, e1, a1)
    },
    else_branch = e () => (float[2,3] o2) {
      s2 = Constant <value = int64[2] {0, 0}> ()
      e2 = Constant <value = int64[2] {2, 3}> ()
      o2 = Slice (x, s2, e2)
    }
  >
}""")
    result = passes(model, "fold_chains")
    assert result.reports[0].changes, "the Slices were not merged"
    for k in (True, False):
        assert_same(result.original, result.final, fixed={"k": np.array(k)})


def test_fuse_conv_affine_never_overwrites_existing_scaled_weight():
    # onnxscript names the folded weight "<w>_scaled"; here that initializer already exists
    model = parse("""
<ir_version: 8, opset_import: ["": 17]>
g (float[1,2,4,4] x) => (float[1,2,4,4] y, float[1,2,4,4] y2)
  <float[2,2,1,1] w = {1, 0.5, -0.5, 1}, float[2] b = {0.1, -0.1}, float[2,2,1,1] w_scaled = {3, 3, 3, 3},
   float[2] b2 = {0.2, 0.3}> {
  s = Constant <value = float {2.0}> ()
  t = Constant <value = float {0.5}> ()
  xs = Mul (x, s)
  xt = Add (xs, t)
  y = Conv <pads = [0, 0, 0, 0]> (xt, w, b)
  y2 = Conv (x, w_scaled, b2)
}""")
    result = passes(model, "fuse_conv_affine")
    assert "Mul" not in ops(result.final)
    assert_same(result.original, result.final)


# --------------------------------------------------------------------------- 5. opsets


_DECOMPOSED_LN = """
<ir_version: 8, opset_import: ["": {opset}]>
g (float[2,4,8] x) => (float[2,4,8] y) {{
  {mean}
  d = Sub (x, m)
  two = Constant <value = float {{2.0}}> ()
  p = Pow (d, two)
  {var}
  e = Constant <value = float {{1e-5}}> ()
  ve = Add (v, e)
  sd = Sqrt (ve)
  nrm = Div (d, sd)
  gam = Constant <value = float[8] {{1,2,1,2,1,2,1,2}}> ()
  bet = Constant <value = float[8] {{0,1,0,1,0,1,0,1}}> ()
  sc = Mul (nrm, gam)
  y = Add (sc, bet)
}}"""


def _ln_model(opset: int) -> onnx.ModelProto:
    if opset >= 18:
        mean = 'ax = Constant <value = int64[1] {-1}> ()\n  m = ReduceMean (x, ax)'
        var = "v = ReduceMean (p, ax)"
    else:
        mean = "m = ReduceMean <axes = [-1]> (x)"
        var = "v = ReduceMean <axes = [-1]> (p)"
    return parse(_DECOMPOSED_LN.format(opset=opset, mean=mean, var=var))


@pytest.mark.parametrize("opset", [11, 12, 13, 17, 20])
def test_fuse_layernorm_never_writes_layernormalization_the_opset_lacks(opset):
    model = _ln_model(opset)
    result = passes(model, "fuse_layernorm")
    assert ("LayerNormalization" in ops(result.final)) == (opset >= 17)
    assert_same(result.original, result.final)


@pytest.mark.parametrize("opset", [11, 12, 13, 17, 20])
def test_fuse_gelu_writes_gelu_only_where_the_opset_has_it(opset):
    model = parse(f"""
<ir_version: 8, opset_import: ["": {opset}]>
g (float[2,8] x) => (float[2,8] y) {{
  r2 = Constant <value = float {{1.4142135}}> ()
  one = Constant <value = float {{1.0}}> ()
  half = Constant <value = float {{0.5}}> ()
  d = Div (x, r2)
  e = Erf (d)
  a = Add (e, one)
  m = Mul (x, a)
  y = Mul (m, half)
}}""")
    result = passes(model, "fuse_gelu")
    gelu = next(n for n in result.final.graph.node if n.op_type == "Gelu")
    imports = {o.domain: o.version for o in result.final.opset_import}
    if opset >= 20:
        assert gelu.domain == ""
    else:
        assert gelu.domain == "com.microsoft" and imports.get("com.microsoft") == 1
    assert_same(result.original, result.final)


@pytest.mark.parametrize("opset", [11, 12, 13, 17, 20])
def test_nchwc_layout_never_writes_onnx_ops_the_opset_lacks(opset):
    # onnxruntime fuses this into LayerNormalization / SimplifiedLayerNormalization in the ONNX
    # domain, which opset < 17 (LayerNormalization) or no opset (Simplified...) has
    mean_attr = opset < 18
    red = (lambda v, o: f"{o} = ReduceMean <axes = [-1]> ({v})") if mean_attr else \
          (lambda v, o: f"{o} = ReduceMean ({v}, ax)")
    model = parse(f"""
<ir_version: 8, opset_import: ["": {opset}]>
g (float[1,8,6,6] x) => (float[1,8,6,6] y) {{
  ax = Constant <value = int64[1] {{-1}}> ()
  w = Constant <value = float[8,8,1,1] {{{",".join(["0.1"] * 64)}}}> ()
  c = Conv (x, w)
  two = Constant <value = float {{2.0}}> ()
  p = Pow (c, two)
  {red("p", "v")}
  e = Constant <value = float {{1e-5}}> ()
  ve = Add (v, e)
  sd = Sqrt (ve)
  nrm = Div (c, sd)
  gam = Constant <value = float[6] {{1, 2, 1, 2, 1, 2}}> ()
  y = Mul (nrm, gam)
}}""")
    result = passes(model, "nchwc_layout")
    final = result.final
    for node in final.graph.node:
        if node.domain in ("", "ai.onnx"):
            assert onnx.defs.has(node.op_type, opset, ""), node.op_type
    assert_same(result.original, final, rtol=1e-3, atol=1e-4)


# --------------------------------------------------------------------------- 6. value_info


def test_constant_folding_never_keeps_negative_dims():
    # Paddle writes -1 for unknown dims; once folding makes the size computable, shape
    # inference finds that -1 contradicts it
    model = parse("""
<ir_version: 8, opset_import: ["": 11]>
g (float[1,3,2,2] x) => (float[1,12] y) {
  s = Shape (x)
  i = Constant <value = int64[1] {0}> ()
  n = Gather (s, i)
  m1 = Constant <value = int64[1] {-1}> ()
  t = Concat <axis = 0> (n, m1)
  y = Reshape (x, t)
}""")
    model.graph.output[0].type.tensor_type.shape.dim[0].Clear()
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_value = -1
    result = passes(model, "fold_constants")
    assert "Shape" not in ops(result.final)
    assert_same(result.original, result.final)


def test_constant_folding_never_keeps_an_output_size_the_graph_does_not_make():
    # an export declared the example's length (99) for a dynamic dim; folding the Reshape
    # target makes the real size (12) computable, and the declaration then contradicts it
    model = parse("""
<ir_version: 8, opset_import: ["": 13]>
g (float[2,3,4] x) => (float[2,99] y) {
  s = Shape (x)
  i = Constant <value = int64[1] {0}> ()
  n = Gather (s, i)
  rest = Constant <value = int64[1] {12}> ()
  c = Concat <axis = 0> (n, rest)
  t = Abs (c)
  y = Reshape (x, t)
}""")
    result = passes(model, "fold_constants")
    assert "Shape" not in ops(result.final)
    out = result.final.graph.output[0]
    assert out.name == "y" and len(out.type.tensor_type.shape.dim) == 2
    assert_same(result.original, result.final)


def test_constant_folding_declines_rather_than_contradict_a_declared_output_rank():
    # ddddocr: a torch export declares [1, seqlen] for a rank-3 output; once folding makes the
    # Reshape target a constant the checker proves the declaration wrong. The rank is the
    # model's interface, so the fold is declined.
    model = parse("""
<ir_version: 8, opset_import: ["": 13]>
g (float[2,3,4] x) => (float[1,seqlen] y) {
  s = Shape (x)
  i = Constant <value = int64[1] {0}> ()
  n = Gather (s, i)
  rest = Constant <value = int64[2] {1, 12}> ()
  c = Concat <axis = 0> (n, rest)
  t = Abs (c)
  y = Reshape (x, t)
}""")
    result = passes(model, "fold_constants")
    assert "Reshape" in ops(result.final)
    assert_valid(result.original, result.final)


def test_fp16_never_leaves_fp16_value_info_on_fp32_weights():
    # Paddle keeps BatchNorm parameters in Constant nodes; BatchNorm stays fp32, so must they
    model = parse("""
<ir_version: 7, opset_import: ["": 11]>
g (float[1,2,3,3] x) => (float[1,2,3,3] y) {
  w = Constant <value = float[2,2,1,1] {1, 0.5, -0.5, 1}> ()
  c = Conv (x, w)
  sc = Constant <value = float[2] {1.0, 2.0}> ()
  bi = Constant <value = float[2] {0.1, 0.2}> ()
  mu = Constant <value = float[2] {0.0, 0.5}> ()
  va = Constant <value = float[2] {1.0, 2.0}> ()
  y = BatchNormalization (c, sc, bi, mu, va)
}""")
    result = passes(model, "fp16")
    assert_valid(result.original, result.final)


def test_nchwc_layout_on_ir3_model_keeps_inputs_and_is_valid():
    # IR 3 lists every weight as a graph input; onnxruntime folds some and saves the input alone
    text = """
<ir_version: 3, opset_import: ["": 9]>
g (float[1,8,6,6] x, float[8,8,3,3] w, float[8] b, int64[1] bshape) => (float[1,8,6,6] y) {
  bb = Expand (b, bshape)
  c = Conv <pads = [1, 1, 1, 1]> (x, w, bb)
  y = Relu (c)
}"""
    model = onnx.parser.parse_model(text)
    rng = np.random.default_rng(0)
    model.graph.initializer.extend([
        onnx.numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.1).astype(np.float32), "w"),
        onnx.numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b"),
        onnx.numpy_helper.from_array(np.array([8], np.int64), "bshape"),
    ])
    onnx.checker.check_model(model, full_check=True)
    result = passes(model, "nchwc_layout")
    assert_same(result.original, result.final, rtol=1e-3, atol=1e-4)


# --------------------------------------------------------------------------- 7. precision


def _paddle_like_matmul() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((16, 8)) * 0.1).astype(np.float32)
    vals = ",".join(f"{v:.6f}" for v in w.reshape(-1))
    return parse(f"""
<ir_version: 7, opset_import: ["": 11]>
g (float[4,16] x) => (float[4,8] y) {{
  w = Constant <value = float[16,8] {{{vals}}}> ()
  m = MatMul (x, w)
  y = Relu (m)
}}""")


def test_int8_dynamic_quantizes_weights_held_in_constant_nodes():
    model = _paddle_like_matmul()
    result = passes(model, "int8_dynamic")
    assert "MatMulInteger" in ops(result.final)
    assert_valid(result.original, result.final)


def test_int8_static_quantizes_weights_held_in_constant_nodes():
    model = _paddle_like_matmul()
    result = passes(model, "int8_static")
    assert "DequantizeLinear" in ops(result.final)
    assert_valid(result.original, result.final)


def test_int8_static_on_ir3_model_keeps_initializers_valid():
    # IR 3 wants every initializer listed as an input; the quantizer adds scales and zero
    # points as initializers only
    model = onnx.parser.parse_model("""
<ir_version: 3, opset_import: ["": 9]>
g (float[4,16] x, float[16,8] w) => (float[4,8] y) {
  m = MatMul (x, w)
  y = Relu (m)
}""")
    w = (np.random.default_rng(0).standard_normal((16, 8)) * 0.1).astype(np.float32)
    model.graph.initializer.append(onnx.numpy_helper.from_array(w, "w"))
    onnx.checker.check_model(model, full_check=True)
    result = passes(model, "int8_static")
    assert "DequantizeLinear" in ops(result.final)
    assert_valid(result.original, result.final)


_IF_MODEL = """
<ir_version: 8, opset_import: ["": 17]>
g (float[4,16] x, bool k) => (float[4,8] z) {
  w = Constant <value = float[16,8] {W}> ()
  m = MatMul (x, w)
  r = Relu (m)
  z = If (k) <
    then_branch = t () => (float[4,8] o) { e = Exp (r)  o = Log (e) },
    else_branch = f () => (float[4,8] o2) { o2 = Neg (r) }
  >
}"""


@pytest.mark.parametrize("pass_name", ["fp16", "int8_dynamic", "int8_static"])
def test_precision_passes_keep_models_with_if_subgraphs_valid(pass_name):
    # the fp16 converter put the Casts around the branch's fp32 Log/Exp into the main graph;
    # the quantizers' sort does not see subgraph reads of outer values
    rng = np.random.default_rng(1)
    w = ",".join(f"{v:.6f}" for v in (rng.standard_normal(128) * 0.1))
    model = parse(_IF_MODEL.replace("{W}", "{" + w + "}"))
    result = passes(model, pass_name)
    assert result.reports[0].changes, f"{pass_name} did nothing"
    sess = assert_valid(result.original, result.final)
    for k in (True, False):
        out = sess.run(None, feeds(model, zeros=False, fixed={"k": np.array(k)}))[0]
        assert out.dtype == np.float32 and np.all(np.isfinite(out))


def test_precision_module_never_changes_the_working_directory(monkeypatch):
    from fusionviz.passes import precision

    assert "os.chdir" not in inspect.getsource(precision)

    def refuse(path):  # pragma: no cover - the assertion is that it is never called
        raise AssertionError(f"os.chdir({path!r}) changes the directory of every thread")

    monkeypatch.setattr(os, "chdir", refuse)
    model = _paddle_like_matmul()
    result = passes(model, "int8_static")
    assert "DequantizeLinear" in ops(result.final)


# --------------------------------------------------------------------------- 8. conv affine numerics


def test_fuse_conv_affine_keeps_near_zero_outputs_within_tolerance():
    # y = 3·Conv(x) − 3·b: the outputs sit near zero; the fold must not add error on top of
    # float32 rounding (weights scaled in float64, then rounded once)
    model = parse("""
<ir_version: 8, opset_import: ["": 17]>
g (float[1,2,4,4] x) => (float[1,2,4,4] y)
  <float[2,2,1,1] w = {1e-3, 2e-3, -1e-3, 1e-3}, float[2] b = {0.1, -0.1}> {
  c = Conv (x, w, b)
  s = Constant <value = float[2,1,1] {3.0, 3.0}> ()
  cs = Mul (c, s)
  t = Constant <value = float[2,1,1] {-0.3, 0.3}> ()
  y = Add (cs, t)
}""")
    result = passes(model, "fuse_conv_affine")
    assert ops(result.final) == ["Conv"]
    assert_same(result.original, result.final)
