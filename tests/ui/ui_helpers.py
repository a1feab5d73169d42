"""Helpers for the Streamlit AppTest suite (imported by test modules and conftest)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app.py")
TIMEOUT = 300  # AppTest script-run limit; generous for loaded 2-core CI machines


def page_path(name: str) -> str:
    """Path of a page file relative to app.py (what AppTest.switch_page wants)."""
    return f"fusionviz/ui/{name}_page.py"


def errors_of(at) -> list[str]:
    return [e.value for e in at.error]


def goto(at, name: str):
    at.switch_page(page_path(name)).run()
    assert not at.exception, at.exception
    return at


TEST_PASSES = '''"""A pass for tests only: its result breaks the model's signature, so the pipeline declines it."""

import onnx_ir as ir

from fusionviz.passes.base import Category, Pass


class BreakSignature(Pass):
    name = "test_break_signature"
    title = "Test: rename the first output"
    category = Category.SIMPLIFY
    explain = "Renames the graph's first output: the validity rule must decline it."
    order = 194

    def transform(self, model):
        out = model.graph.outputs[0]
        node = ir.node("Identity", inputs=[out], name="test_break_signature")
        new = node.outputs[0]
        new.name = f"{out.name}_renamed"
        new.dtype, new.shape = out.dtype, out.shape
        model.graph.append(node)
        model.graph.outputs[0] = new
        return None


PASSES = [BreakSignature]
'''
