"""The address after quick toggles, in Chromium: toggles made while the previous rerun is still
running or its address is still on its way to the browser end in an address that, opened in a
fresh browser context, shows the same state (state rule 3).

A loaded machine is made on purpose: the page's WebSocket holds the server's new addresses
(``pageInfoChanged`` messages) back until the toggles are done and then hands them to
Streamlit in order, so the second toggle's rerun request carries the address from before the
first toggle, as on a busy machine. Screenshots go to ``artifacts/screens/``.
"""

from __future__ import annotations

from urllib import parse

import pytest
from conftest import assert_clean, screenshot, wait_idle

pytestmark = pytest.mark.e2e


#: While ``window.fvHold`` is true the server's address messages (ForwardMsg field 12,
#: ``page_info_changed``) are held back; ``window.fvRelease()`` hands them to Streamlit in the
#: order they came. Every other message comes at once.
SLOW_SOCKET = """
(() => {
  window.fvHold = false;
  window.fvHeld = [];
  const PAGE_INFO = 12;
  function isPageInfo(buf) {  // the top-level fields of a protobuf message
    const b = new Uint8Array(buf);
    let i = 0;
    const varint = () => { let v = 0, s = 0, c; do { c = b[i++]; v += (c & 127) * 2 ** s; s += 7; } while (c & 128 && i < b.length); return v; };
    const fields = [];
    while (i < b.length) {
      const tag = varint(), wire = tag & 7;
      fields.push(Math.floor(tag / 8));
      if (wire === 0) varint(); else if (wire === 2) { const n = varint(); i += n; } else if (wire === 1) i += 8; else if (wire === 5) i += 4; else return false;
    }
    return i === b.length && fields.includes(PAGE_INFO);
  }
  const add = WebSocket.prototype.addEventListener;
  WebSocket.prototype.addEventListener = function (type, fn, opts) {
    if (type !== 'message') return add.call(this, type, fn, opts);
    return add.call(this, type, (ev) => {
      if (!window.fvHold || !(ev.data instanceof ArrayBuffer) || !isPageInfo(ev.data)) return fn.call(this, ev);
      window.fvHeld.push(() => fn.call(this, ev));
    }, opts);
  };
  window.fvRelease = () => {
    window.fvHold = false;
    const held = window.fvHeld.splice(0);
    held.forEach((f) => f());
    return held.length;
  };
})();
"""


def _toggle(page, label: str):
    return page.locator('[data-testid="stCheckbox"]', has_text=label).first


def _is_on(page, label: str) -> bool:
    return _toggle(page, label).locator("input").is_checked()


def _settle(page) -> None:
    wait_idle(page)
    assert page.evaluate("window.fvRelease()") >= 1  # the held addresses, in order
    page.wait_for_timeout(500)
    wait_idle(page)


def _fresh(browser, url: str):
    ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
    page = ctx.new_page()
    page.set_default_timeout(120_000)
    page.goto(url)
    wait_idle(page)
    return ctx, page


def test_quick_pass_toggles_leave_the_address_of_the_last_state(server, browser):
    ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
    ctx.add_init_script(SLOW_SOCKET)
    page = ctx.new_page()
    page.set_default_timeout(120_000)
    try:
        page.goto(server + "/passes?sample=textbook&passes=eliminate_identity")
        wait_idle(page)
        label = "Identity elimination"
        assert _is_on(page, label)
        page.evaluate("window.fvHold = true")
        _toggle(page, label).click()  # off: the run ends, its address is on its way...
        wait_idle(page, 30)
        assert "passes=eliminate_identity" in page.url  # (still the older address)
        _toggle(page, label).click()  # ...and on again before it arrived
        _settle(page)
        assert _is_on(page, label)
        query = parse.parse_qs(parse.urlparse(page.url).query, keep_blank_values=True)
        assert query.get("passes") == ["eliminate_identity"], page.url
        screenshot(page, "url_state_quick_toggles")
        other, fresh = _fresh(browser, page.url)
        try:
            assert _is_on(fresh, label)
            assert_clean(fresh)
            screenshot(fresh, "url_state_quick_toggles_fresh_context")
        finally:
            other.close()
    finally:
        ctx.close()


def test_quick_graph_toggles_and_focus_survive_a_shared_link(server, browser):
    ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
    ctx.add_init_script(SLOW_SOCKET)
    page = ctx.new_page()
    page.set_default_timeout(120_000)
    try:
        page.goto(server + "/graph?sample=textbook&passes=eliminate_identity,fold_batchnorm&focus=Conv_0")
        wait_idle(page)
        assert _is_on(page, "Collapse") and not _is_on(page, "Changed only")
        page.evaluate("window.fvHold = true")
        _toggle(page, "Changed only").click()
        wait_idle(page, 30)
        _toggle(page, "Collapse").click()  # while the first toggle's address is still on its way
        page.wait_for_timeout(300)
        _toggle(page, "Changed only").click()  # and the first one back, while that run runs
        _settle(page)
        query = parse.parse_qs(parse.urlparse(page.url).query, keep_blank_values=True)
        assert query.get("g.collapse") == ["off"] and "g.changed_only" not in query, page.url
        assert query.get("focus") == ["Conv_0"], page.url
        screenshot(page, "url_state_graph_toggles")
        other, fresh = _fresh(browser, page.url)
        try:
            assert not _is_on(fresh, "Collapse") and not _is_on(fresh, "Changed only")
            assert "Conv_0" in fresh.inner_text("body")  # the focus bar names the node
            assert_clean(fresh)
            screenshot(fresh, "url_state_graph_toggles_fresh_context")
        finally:
            other.close()
    finally:
        ctx.close()
