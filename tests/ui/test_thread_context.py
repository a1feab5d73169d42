"""Background work of the pages logs no "missing ScriptRunContext" warning (the what-if prefetch
calls the page's st.cache functions from its own thread)."""

from __future__ import annotations

import logging

from streamlit.testing.v1 import AppTest

LOGGER = "streamlit.runtime.scriptrunner_utils.script_run_context"


def _prefetch_script() -> None:
    from fusionviz.ui import cache

    loaded = cache.load_sample("textbook")
    import threading

    cache.prefetch_neighbours(loaded, ["eliminate_identity"], (), (("collapse", True), ("max_nodes", 400)),
                              ["fold_batchnorm", "eliminate_dropout", "eliminate_identity"])
    threads = [t for t in threading.enumerate() if t.name == "fusionviz-prefetch"]
    assert threads, "the prefetch did not start"
    for t in threads:
        t.join(120)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_the_prefetch_thread_runs_with_the_page_context(monkeypatch):
    monkeypatch.setenv("FUSIONVIZ_PREFETCH", "1")
    monkeypatch.setenv("FUSIONVIZ_PREFETCH_MAX_LOAD", "1000")
    seen = _Lines()
    logging.getLogger(LOGGER).addHandler(seen)
    try:
        at = AppTest.from_function(_prefetch_script, default_timeout=300)
        at.run()
        assert not at.exception, at.exception
    finally:
        logging.getLogger(LOGGER).removeHandler(seen)
    assert not [line for line in seen.lines if "fusionviz-prefetch" in line], seen.lines
