"""Pass names: one scheme, the module's name, and the earlier names still accepted."""

from __future__ import annotations

import sys

import pytest

from fusionviz import cli
from fusionviz.passes import all_passes, registry

EARLIER = {
    "constant_folding": "fold_constants", "identity_elimination": "eliminate_identity",
    "dropout_elimination": "eliminate_dropout", "cse": "eliminate_common_subexpressions",
    "attention_fusion": "fuse_attention", "skip_layernorm_fusion": "fuse_skip_layernorm",
    "bias_gelu_fusion": "fuse_bias_gelu", "matmul_add_to_gemm": "fuse_matmul_add",
    "fused_matmul": "fuse_matmul_transpose", "dedup_initializers": "eliminate_duplicate_initializers",
}


def test_a_pass_is_named_as_its_module():
    for p in all_passes():
        module = sys.modules[type(p).__module__].__name__.rsplit(".", 1)[-1]
        if module.startswith("fv_"):  # a test's own module of passes
            continue
        assert module == p.name, (p.name, type(p).__module__)


def test_simplify_and_fuse_passes_use_one_scheme():
    for p in all_passes():
        if p.category.value in ("simplify", "fuse") and not p.name.startswith("test_"):
            assert p.name.split("_", 1)[0] in ("fuse", "fold", "eliminate"), p.name


@pytest.mark.parametrize("old,new", sorted(EARLIER.items()))
def test_earlier_names_resolve_to_the_pass(old, new):
    assert registry.get_pass(old).name == new
    assert registry.canonical_name(old) == new
    assert old not in registry.pass_names()


def test_a_misspelled_earlier_name_suggests_the_pass():
    from fusionviz import errors

    with pytest.raises(errors.InputSpecError, match="eliminate_identity"):
        registry.get_pass("identity_eliminaton")


def test_the_cli_and_links_accept_earlier_names(tmp_path, capsys):
    from fusionviz.ui import state

    assert state.canonical(["attention_fusion", "identity_elimination", "nope"]) == [
        "eliminate_identity", "fuse_attention"]
    out = tmp_path / "o.onnx"
    code = cli.main(["optimize", "textbook", "-o", str(out), "--passes", "identity_elimination,cse"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "eliminate_identity" in err and "eliminate_common_subexpressions" in err
