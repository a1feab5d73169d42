"""Fixtures for browser tests: a Streamlit server on a free port and Debian's chromium via Playwright.

No browser is ever downloaded: chromium comes from the system (``/usr/bin/chromium``, apt). When it
is missing the tests skip, unless ``FUSIONVIZ_REQUIRE_BROWSER=1`` (``make test``, CI): then they fail.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts" / "e2e"
CHROMIUM = os.environ.get("FUSIONVIZ_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync",
                 "--disable-dev-shm-usage"]


def _require_browser() -> bool:
    return os.environ.get("FUSIONVIZ_REQUIRE_BROWSER", "") == "1"


def _missing(reason: str):
    if _require_browser():
        pytest.fail(f"{reason} (FUSIONVIZ_REQUIRE_BROWSER=1: browser tests must run)")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, *app_args: str, log_path: Path | None = None) -> subprocess.Popen:
    """Start ``streamlit run app.py`` in its own process group and wait for its health endpoint."""
    streamlit = Path(sys.executable).with_name("streamlit")
    cmd = [str(streamlit) if streamlit.exists() else shutil.which("streamlit") or "streamlit",
           "run", "app.py", "--server.port", str(port), "--server.headless", "true",
           "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"]
    if app_args:
        cmd += ["--", *app_args]
    log = open(log_path, "wb") if log_path else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}; see {log_path}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.3)
    stop_server(proc)
    raise RuntimeError("streamlit did not become healthy within 60 s")


def stop_server(proc: subprocess.Popen) -> None:
    """Stop the server we started (its own process group only)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture(scope="session")
def server():
    """Base URL of a fresh app server (killed at the end of the session)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    port = free_port()
    proc = start_server(port, "--sample", "resnet_ts", log_path=ARTIFACTS / "server.log")
    yield f"http://127.0.0.1:{port}"
    stop_server(proc)


@pytest.fixture(scope="session")
def browser():
    """Debian's chromium driven by Playwright (never a downloaded browser)."""
    if not Path(CHROMIUM).exists():
        _missing(f"chromium not found at {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("the playwright Python package is not installed")
    pw = sync_playwright().start()
    b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
    yield b
    b.close()
    pw.stop()


@pytest.fixture
def page(browser):
    """A new page at 1600×1000, closed after the test."""
    ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
    p = ctx.new_page()
    p.set_default_timeout(60_000)
    yield p
    ctx.close()
