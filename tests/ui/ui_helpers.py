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
