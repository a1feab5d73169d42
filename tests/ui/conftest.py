"""Fixtures for the Streamlit AppTest suite."""

from __future__ import annotations

import os

import pytest
from ui_helpers import APP, TIMEOUT

# Speculative prefetch threads would outlive each AppTest and compete with the next one.
os.environ["FUSIONVIZ_PREFETCH"] = "0"


@pytest.fixture
def app():
    """A fresh app session, run once (it opens on the default sample)."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    assert not at.exception, at.exception
    return at
