"""Fixtures for browser tests: a Streamlit server on a free port and Debian's chromium via Playwright.

No browser is ever downloaded: chromium comes from the system (``/usr/bin/chromium``, apt). When it
is missing the tests skip, unless ``FUSIONVIZ_REQUIRE_BROWSER=1`` (``make test``, CI): then they fail.
"""

from __future__ import annotations

import contextlib
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

from tests.ui.ui_helpers import TEST_PASSES  # the one declining test pass (the AppTest suite's too)

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


def start_server(port: int, *app_args: str, log_path: Path | None = None,
                 env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``streamlit run app.py`` in its own process group and wait for its health endpoint.

    ``env`` adds environment variables for the server (and the processes it starts).
    """
    streamlit = Path(sys.executable).with_name("streamlit")
    cmd = [str(streamlit) if streamlit.exists() else shutil.which("streamlit") or "streamlit",
           "run", "app.py", "--server.port", str(port), "--server.headless", "true",
           "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"]
    if app_args:
        cmd += ["--", *app_args]
    log = open(log_path, "wb") if log_path else subprocess.DEVNULL  # noqa: SIM115
    full_env = {**os.environ, **env} if env else None
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env=full_env)
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


# ------------------------------------------------------------------ helpers for the daily-use tests

SCREENS = ROOT / "artifacts" / "screens"


def screenshot(page, name: str, *, full_page: bool = False) -> Path:
    """Save ``artifacts/screens/<name>.png`` and return its path."""
    SCREENS.mkdir(parents=True, exist_ok=True)
    path = SCREENS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path


def assert_clean(page) -> None:
    """No traceback, no Streamlit exception box and no 'Page not found' anywhere on the page."""
    assert page.locator('[data-testid="stException"]').count() == 0, "a traceback reached the page"
    text = page.inner_text("body")
    assert "Traceback (most recent call last)" not in text
    assert "Page not found" not in text, "Streamlit said 'Page not found'"


IDLE_JS = """
() => {
  const app = document.querySelector('[data-testid="stApp"]');
  const state = app ? app.getAttribute('data-test-script-state') : 'initial';
  const skeletons = document.querySelectorAll('[data-testid="stSkeleton"]').length;
  return state === 'notRunning' && skeletons === 0;
}
"""


def wait_idle(page, timeout_s: float = 120) -> None:
    """Wait until the app's script run has finished and every element is drawn (no skeletons),
    twice in a row 0.3 s apart (a rerun may follow a run)."""
    deadline = time.monotonic() + timeout_s
    page.wait_for_timeout(300)
    calm = 0
    while time.monotonic() < deadline:
        calm = calm + 1 if page.evaluate(IDLE_JS) else 0
        if calm >= 2:
            return
        page.wait_for_timeout(300)
    raise AssertionError(f"the app was still running after {timeout_s} s")


def nav(page, title: str) -> None:
    """Go to another page through the sidebar (same session)."""
    page.locator('[data-testid="stSidebarNavLink"]', has_text=title).first.click()
    wait_idle(page)


@contextlib.contextmanager
def fresh_server(*app_args: str, name: str = "fresh", env: dict[str, str] | None = None):
    """A server of its own (a fresh process: empty caches, no session yet); yields its base URL."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    port = free_port()
    proc = start_server(port, *app_args, log_path=ARTIFACTS / f"server-{name}.log", env=env)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_server(proc)


@contextlib.contextmanager
def app_page(browser, timeout_ms: int = 300_000):
    """A page at 1600×1000 in a browser context of its own, closed after the block."""
    ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
    try:
        page = ctx.new_page()
        page.set_default_timeout(timeout_ms)
        yield page
    finally:
        ctx.close()


#: every drawn graph node of the page and of its component iframes: its ``<title>`` (``what`` =
#: "title") or its whole text, labels included ("text": a collapsed block's label names its ops)
DRAWN_NODES_JS = """
(what) => {
  const docs = [document];
  for (const f of document.querySelectorAll('iframe')) {
    try { if (f.contentDocument) docs.push(f.contentDocument); } catch (e) {}
  }
  const out = [];
  for (const d of docs) {
    for (const g of d.querySelectorAll('svg g.node')) {
      if (what !== 'title') { out.push(g.textContent); continue; }
      const t = g.querySelector(':scope > title');
      if (t) out.push(t.textContent);
    }
  }
  return out;
}
"""


def drawn_nodes(page, what: str = "text") -> list[str]:
    """:data:`DRAWN_NODES_JS` on a (sync) Playwright page."""
    return page.evaluate(DRAWN_NODES_JS, what)


#: where ``benchmarks/wild.py`` caches the wild corpus (third-party models, pinned in its manifest)
WILD = Path.home() / ".cache" / "fusionviz" / "wild" / "models"


def wild_model(name: str) -> str:
    """The path of a wild-corpus model, or the test is skipped when it is not cached here."""
    found = sorted(WILD.glob(f"{name}/*.onnx"))
    if not found:
        pytest.skip(f"the wild corpus ({name}) is not cached here")
    return str(found[0])


SITECUSTOMIZE = '''try:  # tests only: register the declining test pass in every process of the server
    from fusionviz.passes import registry

    registry._MODULES = (*registry._MODULES, "fv_test_passes")
except Exception:  # noqa: BLE001
    pass
'''


def declining_pass_env(folder: Path) -> dict[str, str]:
    """Environment for a server whose registry holds ``test_break_signature``, a pass whose
    result the validity rule declines (a real pass that breaks the rule is a bug that gets
    fixed, so tests bring their own)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "fv_test_passes.py").write_text(TEST_PASSES)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    path = os.pathsep.join([str(folder), str(ROOT), os.environ.get("PYTHONPATH", "")])
    return {"PYTHONPATH": path.rstrip(os.pathsep)}
