"""Canary: what fusionviz takes from onnxscript's and onnx-ir's internals is still there.

Everything private is reached through fusionviz/passes/_compat.py; these tests fail with the
name of the symbol that moved or changed when the installed versions differ from the pins.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import pathlib
import re

import pytest

PINS = {"onnxscript": "0.7.2", "onnx-ir": "1.1.0"}
ROOT = pathlib.Path(__file__).resolve().parents[2]

#: (module, attribute) pairs _compat.py reads, each a private name of the libraries
PRIVATE = [
    ("onnxscript.rewriter.rules.common._fuse_batchnorm", "FuseBatchNormIntoConv"),
    ("onnxscript.rewriter.rules.common._fuse_batchnorm", "FuseBatchNormIntoConvTranspose"),
    ("onnxscript.rewriter.rules.common._fuse_batchnorm", "FuseBatchNormIntoGemm"),
    ("onnxscript.rewriter.rules.common._fuse_conv_affine", "AffineConvFusion"),
    ("onnxscript.rewriter.rules.common._fuse_pad_into_conv", "FuseConvPad"),
    ("onnxscript.rewriter.rules.common._fuse_pad_into_conv", "NormalizePadFormatConv"),
    ("onnxscript.rewriter.rules.common._matmul_add_to_gemm", "MatMulAddToGemm"),
    ("onnxscript.rewriter.rules.common._matmul_add_to_gemm", "TransABMatMulAddToGemm"),
    ("onnxscript.rewriter.ort_fusions.gelu", "GeluErfFusion"),
    ("onnxscript.rewriter.ort_fusions.gelu", "GeluTanhFusion"),
    ("onnxscript.rewriter.ort_fusions.erfgelu", "erf_gelu_pattern_2"),
    ("onnxscript.rewriter.ort_fusions.erfgelu", "gelu"),
    ("onnxscript.rewriter.ort_fusions.rms_normalization", "RmsNormFusion"),
    ("onnxscript.rewriter.rules.fusion._layer_norm", "LayerNormFusion"),
    ("onnxscript.rewriter.rules.fusion._layer_norm", "LayerNormBiasFusion"),
    ("onnxscript.optimizer._constant_folding", "FoldConstantsPass"),
    ("onnxscript.optimizer._constant_folding", "Replacement"),
    ("onnxscript.rewriter._pattern_ir", "StringConstantPattern"),
    ("onnxscript.rewriter._pattern_ir", "NodeOutputPattern"),
    ("onnx_ir.passes.common._c_api_utils", "call_onnx_api"),
]


@pytest.mark.parametrize("dist", sorted(PINS))
def test_installed_version_is_the_pinned_one(dist):
    got = importlib.metadata.version(dist)
    assert got == PINS[dist], f"{dist} {got} is installed; fusionviz/passes/_compat.py is checked against {PINS[dist]}"
    for f in ("requirements.txt", "pyproject.toml"):
        text = (ROOT / f).read_text()
        assert re.search(rf'^\s*"?{re.escape(dist)}=={re.escape(PINS[dist])}\b', text, re.M), f"{f} does not pin {dist}=={PINS[dist]}"


@pytest.mark.parametrize(("module", "name"), PRIVATE, ids=[f"{m}.{n}" for m, n in PRIVATE])
def test_private_symbol_is_still_there(module, name):
    mod = importlib.import_module(module)
    assert hasattr(mod, name), f"{module}.{name} is gone: update fusionviz/passes/_compat.py"


@pytest.mark.parametrize("member", ["_do_inference", "_opset_imports", "process_node", "visit_attribute", "call"])
def test_constant_folder_members_we_hook(member):
    from onnxscript.optimizer._constant_folding import FoldConstantsPass

    folder = FoldConstantsPass(shape_inference=False, input_size_limit=1, output_size_limit=1)
    assert hasattr(folder, member), f"FoldConstantsPass.{member} is gone: update ConstantFolderBase in _compat.py"


def test_rule_internals_we_read():
    from onnxscript.rewriter import pattern as orp

    from fusionviz.passes import _compat

    rule = orp.RewriteRule(lambda op, x: op.Relu(op.Abs(x)), lambda op, x: op.Abs(x))
    for attr in ("_target_pattern", "_replacement_pattern", "_condition_function", "_verbose", "_matcher"):
        assert hasattr(rule, attr), f"RewriteRule.{attr} is gone: update _compat.with_matcher / pattern_ops"
    params = inspect.signature(orp.RewriteRule.__init__).parameters
    assert list(params)[1:11] == ["target_pattern", "replacement_pattern", "condition_function", "matcher",
                                  "verbose", "name", "remove_nodes", "graph_pre_visitor", "graph_post_visitor",
                                  "as_function"], "RewriteRule's constructor changed: update _compat.with_matcher"
    assert _compat.pattern_ops(_compat.target_pattern(rule)) == ("Relu", frozenset({"Relu", "Abs"}))
    copy = _compat.with_matcher(rule, orp.SimplePatternMatcher)
    assert copy is not rule and copy._target_pattern is rule._target_pattern


def test_no_other_module_touches_private_library_names():
    private = re.compile(r"(onnxscript|onnx_ir)[\w.]*\._\w|from (onnxscript|onnx_ir)[\w.]* import[^\n]*\b_[a-z]")
    offenders = []
    for path in (ROOT / "fusionviz").rglob("*.py"):
        if path.name == "_compat.py":
            continue
        for line in path.read_text().splitlines():
            if line.lstrip().startswith(("import ", "from ")) and private.search(line):
                offenders.append(f"{path.relative_to(ROOT)}: {line.strip()}")
    assert not offenders, offenders
