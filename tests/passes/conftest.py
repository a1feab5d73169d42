"""Shared helpers for pass tests: build a model from ONNX text, run passes, read the report."""

from __future__ import annotations

import onnx
import onnx.parser
import pytest

from fusionviz.passes import PipelineResult, run_pipeline
from fusionviz.passes.base import ChangeKind


def parse(text: str) -> onnx.ModelProto:
    """A model from ONNX text, checked so that a typo in a test model fails loudly."""
    model = onnx.parser.parse_model(text)
    onnx.checker.check_model(model)
    return model


def ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def changes_of(result: PipelineResult, pass_name: str) -> list:
    for r in result.reports:
        if r.name == pass_name:
            assert r.error is None, r.error
            return list(r.changes)
    raise AssertionError(f"{pass_name} did not run")


def kinds(changes: list) -> set[ChangeKind]:
    return {c.kind for c in changes}


def inputs_of(changes: list) -> set[str]:
    return {n for c in changes for n in c.inputs}


@pytest.fixture
def run():
    """``run(model, *passes)`` -> PipelineResult (fails if a pass reported an error)."""

    def _run(model: onnx.ModelProto, *passes: str) -> PipelineResult:
        result = run_pipeline(model, list(passes))
        errors = [(r.name, r.error) for r in result.reports if r.error]
        assert not errors, errors
        onnx.checker.check_model(result.final, full_check=True)
        return result

    return _run
