"""The graph viewer's basics in a real browser (Debian chromium via Playwright), on a ~300-node
transformer (and on a real OCR detector from the wild corpus when it is cached), window 1600×1000.

One test per point: the first view shows the top of both graphs readably (at least 20 label lines
9 px or taller in each pane, the same zoom in both); fit and fit width; the minimap and its window
rectangle; one wheel step zooms by 10-20%; zoom and pan are synced between the panes (the node
under the centre stays matched) and not when unlinked; the keys `/`, `f`, `n`/`p` and arrows; a
search selects the match and centres it in both panes; the mark colours stay apart from the
change and near-miss colours, and the legend shows what is drawn. Screenshots go to
artifacts/screens/viewer_*.png (look at them).
"""

from __future__ import annotations

import re
import time

import onnx
import pytest
from conftest import app_page, assert_clean, fresh_server, screenshot, wait_idle, wild_model
from test_graph_daily import attr, pane

from fusionviz.graphview.dot import (
    HEAT_FILLS,
    HEAT_NAN,
    NEAR_MISS_BLOCKER,
    NEAR_MISS_MATCHED,
    STATUS_STYLE,
)
from fusionviz.graphview.synthetic import transformer_with_nodes
from fusionviz.ui.graph_component import MARKS

pytestmark = [pytest.mark.e2e]

STATE_JS = "() => window.fvViewer.state()"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A server of its own on a ~300-node transformer (the default passes fuse its attention)."""
    path = tmp_path_factory.mktemp("viewer") / "flat_300.onnx"
    onnx.save(transformer_with_nodes(300, scoped=False), path)
    with fresh_server("--model", str(path), name="viewer") as url:
        yield url


def open_graph(page, url: str) -> None:
    """Open the Graph page drawn node by node: the flat model would otherwise be drawn as its
    repeated blocks (collapse rule 5), and these tests are about the viewer on a 300-node drawing."""
    if "g.collapse=" not in url:
        url += ("&" if "?" in url else "?") + "g.collapse=off"
    page.goto(url)
    page.get_by_role("heading", name="Graph: before and after", exact=True).first.wait_for(timeout=300_000)
    wait_idle(page, 300)
    for side in ("before", "after"):
        fr = pane(page, side)
        fr.wait_for_function("() => document.body.dataset.legible !== undefined", timeout=60_000)


def state(page, side: str) -> dict:
    return pane(page, side).evaluate(STATE_JS)


def frame(page) -> None:
    """Two animation frames of the page (both panes redrawn)."""
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    page.wait_for_timeout(50)


def centre_of(page, side: str) -> tuple[float, float]:
    box = pane(page, side).frame_element().bounding_box()
    return box["x"] + box["width"] / 2, box["y"] + box["height"] / 2


def wheel(page, side: str, dy: float) -> None:
    x, y = centre_of(page, side)
    page.mouse.move(x, y)
    page.mouse.wheel(0, dy)
    frame(page)


def drag(page, side: str, dx: float, dy: float) -> None:
    x, y = centre_of(page, side)
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x + dx, y + dy, steps=8)
    page.mouse.up()
    frame(page)


def common_ids(page) -> list[str]:
    before = set(pane(page, "before").evaluate("() => window.fvViewer.ids()"))
    return [i for i in pane(page, "after").evaluate("() => window.fvViewer.ids()") if i in before]


def blank_spot(fr) -> tuple[float, float]:
    """Page coordinates of a point in the pane with no node under it."""
    box = fr.frame_element().bounding_box()
    at = fr.evaluate("""() => { const r = document.getElementById('view').getBoundingClientRect();
        for (let y = r.top + 60; y < r.bottom - 60; y += 17) for (let x = r.left + 8; x < r.right - 200; x += 23) {
            const e = document.elementFromPoint(x, y);
            if (e && !e.closest('g.node') && !e.closest('#bar') && !e.closest('#mini') && !e.closest('#foot')) return [x, y]; }
        return null; }""")
    assert at, "no blank spot in the pane"
    return box["x"] + at[0], box["y"] + at[1]


def on_screen(page, side: str, node_id: str) -> dict | None:
    return pane(page, side).evaluate("id => window.fvViewer.screenOf(id)", node_id)


# ------------------------------------------------------------------ first view, fit, fit width


def _readable_first_view(page) -> None:
    ks = []
    for side in ("before", "after"):
        fr = pane(page, side)
        n = int(attr(fr, "legible"))
        assert n >= 20, f"{side}: only {n} label lines 9 px or taller in the first view"
        assert fr.evaluate("() => window.fvViewer.legible(9)") >= 20
        st = fr.evaluate(STATE_JS)
        full = fr.evaluate("() => window.fvViewer.full()")
        assert st["y"] <= full["y"] + 1, (side, st, full)  # the top of the drawing
        ks.append(st["k"])
    assert abs(ks[0] - ks[1]) < 1e-6, ks  # the same zoom in both panes


def test_first_view_shows_the_top_of_both_graphs_readably(base, page):
    open_graph(page, base + "/graph")
    _readable_first_view(page)
    assert_clean(page)
    screenshot(page, "viewer_first_view")


def test_first_view_of_a_real_ocr_detector(browser):
    model = wild_model("ppocr_v4_det")
    with fresh_server("--model", model, name="viewer-ppocr") as url:
        with app_page(browser) as page:
            open_graph(page, url + "/graph")
            _readable_first_view(page)
            screenshot(page, "viewer_first_view_ppocr")


def test_fit_and_fit_width(base, page):
    open_graph(page, base + "/graph")
    before = pane(page, "before")
    k_first = state(page, "before")["k"]
    before.locator("#fit").click()
    frame(page)
    for side in ("before", "after"):
        st, full = state(page, side), pane(page, side).evaluate("() => window.fvViewer.full()")
        assert st["k"] < k_first
        # the whole drawing is in view
        assert st["x"] <= full["x"] + 1 and st["y"] <= full["y"] + 1
        assert st["x"] + st["w"] / st["k"] >= full["x"] + full["w"] - 1
        assert st["y"] + st["h"] / st["k"] >= full["y"] + full["h"] - 1
    assert abs(state(page, "before")["k"] - state(page, "after")["k"]) < 1e-6
    screenshot(page, "viewer_fit")
    before.locator("#fitw").click()
    frame(page)
    for side in ("before", "after"):
        st, full = state(page, side), pane(page, side).evaluate("() => window.fvViewer.full()")
        assert st["y"] <= full["y"] + 1  # from the top
    narrow = min(("before", "after"), key=lambda s: state(page, s)["w"] / pane(page, s).evaluate(
        "() => window.fvViewer.full().w"))
    st, full = state(page, narrow), pane(page, narrow).evaluate("() => window.fvViewer.full()")
    assert abs(st["w"] / st["k"] - full["w"]) < 2  # the wider drawing's width fills its pane
    screenshot(page, "viewer_fit_width")


# ------------------------------------------------------------------ minimap


def test_minimap_shows_the_window_and_moves_the_view(base, page):
    open_graph(page, base + "/graph")
    before = pane(page, "before")
    assert before.evaluate("() => !document.getElementById('mini').hidden")
    rect = "() => { const r = document.getElementById('mini-win').getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; }"
    r0 = before.evaluate(rect)
    assert r0[2] > 0 and r0[3] > 0
    drag(page, "before", 0, -400)  # pan down the drawing
    r1 = before.evaluate(rect)
    assert r1[1] > r0[1], (r0, r1)  # the window rectangle moved down
    # A click low on the minimap moves the view there (and the other pane with it).
    y_before = state(page, "before")["cy"]
    after_y = state(page, "after")["cy"]
    mini = before.locator("#mini").bounding_box()
    page.mouse.click(mini["x"] + mini["width"] / 2, mini["y"] + mini["height"] * 0.9)
    frame(page)
    assert state(page, "before")["cy"] > y_before + 500
    assert state(page, "after")["cy"] > after_y + 200
    r2 = before.evaluate(rect)
    assert r2[1] > r1[1]
    screenshot(page, "viewer_minimap")


# ------------------------------------------------------------------ wheel step, sync, unlink


def test_one_wheel_step_zooms_by_ten_to_twenty_percent(base, page):
    open_graph(page, base + "/graph")
    for dy in (100, -100, 600, 3):
        k0 = state(page, "before")["k"]
        wheel(page, "before", dy)
        k1 = state(page, "before")["k"]
        ratio = max(k0, k1) / min(k0, k1)
        if abs(dy) >= 100:
            assert 1.1 <= ratio <= 1.2, (dy, ratio)
        else:
            assert 1.0 < ratio < 1.1, (dy, ratio)  # a touchpad's small delta: a fraction of a step


def test_zoom_and_pan_are_synced_until_unlinked(base, page):
    open_graph(page, base + "/graph")
    after = pane(page, "after")
    assert attr(after, "sync") == "1"
    k_after = state(page, "after")["k"]
    wheel(page, "before", 100)  # zoom out in the before pane...
    assert state(page, "after")["k"] == pytest.approx(state(page, "before")["k"])  # ...both zoom
    assert state(page, "after")["k"] < k_after
    wheel(page, "after", -100)  # and the other way round
    assert state(page, "before")["k"] == pytest.approx(state(page, "after")["k"])
    # Pan down into the middle of the model: the node under the before pane's centre is under the
    # after pane's centre too (the same name in both panes).
    common = set(common_ids(page))
    for _ in range(3):
        drag(page, "before", 30, -300)
    nid = pane(page, "before").evaluate("() => window.fvViewer.nearestCentre()")
    assert nid in common, nid
    b, a = on_screen(page, "before", nid), on_screen(page, "after", nid)
    sb = state(page, "before")
    assert abs(b["x"] - sb["w"] / 2) < 120 and abs(b["y"] - sb["h"] / 2) < 120, b
    assert abs(a["x"] - b["x"]) < 40 and abs(a["y"] - b["y"]) < 40, (nid, a, b)
    screenshot(page, "viewer_synced")
    # Unlinked: the other pane stays where it is.
    after.locator("#link").click()
    frame(page)
    assert attr(after, "sync") == "0" and attr(pane(page, "before"), "sync") == "0"
    still = state(page, "after")
    wheel(page, "before", 100)
    drag(page, "before", 0, -200)
    assert state(page, "after") == still
    screenshot(page, "viewer_unlinked")
    pane(page, "before").locator("#link").click()  # linked again: the other pane catches up
    frame(page)
    assert attr(after, "sync") == "1"
    assert state(page, "after")["k"] == pytest.approx(state(page, "before")["k"])


# ------------------------------------------------------------------ keys


def test_keys_slash_f_and_stepping_through_changes(base, page):
    open_graph(page, base + "/graph")
    focused = "() => document.activeElement && document.activeElement.closest('.st-key-graph_search') !== null"
    # "/" from the page itself...
    page.get_by_role("heading", name="Graph: before and after", exact=True).first.click()
    page.keyboard.press("/")
    assert page.evaluate(focused)
    assert page.get_by_placeholder("Search: name or op type", exact=False).input_value() == ""
    # ...and from a pane (clicked on empty space: no node selected)
    before = pane(page, "before")
    spot = blank_spot(before)
    page.mouse.click(*spot)
    page.keyboard.press("/")
    assert page.evaluate(focused)
    # "f" fits both panes
    page.mouse.click(*spot)
    k0 = state(page, "before")["k"]
    page.keyboard.press("f")
    frame(page)
    assert state(page, "before")["k"] < k0 and state(page, "after")["k"] < k0
    # n / arrows step through the changed nodes of the pane, each centred at a readable zoom
    assert int(attr(before, "changes")) > 3
    seen = []
    for key in ("n", "ArrowDown", "n"):
        page.keyboard.press(key)
        frame(page)
        nid = attr(before, "stepId")
        seen.append((int(attr(before, "step")), nid))
        at, st = on_screen(page, "before", nid), state(page, "before")
        assert st["k"] >= 0.75
        assert abs(at["x"] - st["w"] / 2) < 3 and abs(at["y"] - st["h"] / 2) < 3, (key, at, st)
    assert [s for s, _ in seen] == [1, 2, 3]
    page.keyboard.press("p")
    frame(page)
    assert attr(before, "step") == "2" and attr(before, "stepId") == seen[1][1]
    page.keyboard.press("ArrowUp")
    frame(page)
    assert attr(before, "step") == "1"
    screenshot(page, "viewer_step_change")
    assert_clean(page)


# ------------------------------------------------------------------ search, marks, legend


def _stroke(fr, cls: str) -> str:
    return fr.evaluate("""cls => { const e = document.querySelector('g.node.' + cls + ' > path, g.node.' + cls
        + ' > polygon, g.node.' + cls + ' > ellipse'); return e ? getComputedStyle(e).stroke : null; }""", cls)


def test_search_selects_and_centres_the_match_in_both_panes(base, page):
    open_graph(page, base + "/graph")
    # an old selection: a node clicked in the before pane
    before = pane(page, "before")
    first = before.evaluate("""() => { const s = window.fvViewer.state();
        return window.fvViewer.ids().find(id => { const p = window.fvViewer.screenOf(id);
            return p.x > 40 && p.x < s.w - 40 && p.y > 80 && p.y < s.h - 80; }); }""")
    before.locator(f'g.node[id="{first}"]').click()
    wait_idle(page)
    # a search for a node both panes have, far down the model
    common = common_ids(page)
    target = common[int(len(common) * 0.8)]
    name = target[len("fv-n-"):]
    for side in ("before", "after"):
        pane(page, side).evaluate("() => { window.__kept = true; }")
    box = page.get_by_placeholder("Search: name or op type", exact=False)
    box.fill(name)
    box.press("Enter")
    # centred in both panes by the viewers themselves, before the page's rerun comes back...
    for side in ("before", "after"):
        pane(page, side).wait_for_function("() => document.body.dataset.foundAt !== undefined", timeout=10_000)
        at, st = on_screen(page, side, target), state(page, side)
        assert abs(at["x"] - st["w"] / 2) < 3 and abs(at["y"] - st["h"] / 2) < 3, (side, at, st)
    wait_idle(page)
    # ...in the same frames: the search row appearing above them does not replace them
    for side in ("before", "after"):
        assert pane(page, side).evaluate("() => window.__kept === true"), side
    after = pane(page, "after")
    after.wait_for_function("() => document.body.dataset.centred && document.body.dataset.centred.startsWith('search:')")
    before = pane(page, "before")
    before.wait_for_function("() => document.body.dataset.centred && document.body.dataset.centred.startsWith('search:')")
    # the match is the selection in the after pane and linked in the before pane; the old selection is gone
    assert attr(after, "selected") == "1" and int(attr(before, "linked")) >= 1 and attr(before, "selected") == "0"
    assert int(attr(after, "matches")) >= 1 and int(attr(before, "matches")) >= 1
    sel = after.evaluate("() => document.querySelector('g.node.fv-selected').id")
    assert sel.startswith(target) or name in sel
    for side, fr in (("after", after), ("before", before)):
        ids = fr.evaluate("() => [...document.querySelectorAll('g.node.fv-selected, g.node.fv-linked')].map(g => g.id)")
        assert ids, side
        at, st = on_screen(page, side, ids[0]), state(page, side)
        assert abs(at["x"] - st["w"] / 2) < 60 and abs(at["y"] - st["h"] / 2) < 60, (side, at, st)
        assert st["k"] >= 0.75
    page.get_by_text("in after (teal outline)", exact=False).first.wait_for()
    assert_clean(page)
    screenshot(page, "viewer_search_centred")


def _lab(colour: str) -> tuple[float, float, float]:
    """CIE L*a*b* (D65) of '#rrggbb' or 'rgb(r, g, b)'."""
    if colour.startswith("#"):
        rgb = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    else:
        rgb = [int(v) / 255 for v in re.findall(r"\d+", colour)[:3]]
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    x = (0.4124 * lin[0] + 0.3576 * lin[1] + 0.1805 * lin[2]) / 0.95047
    y = 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    z = (0.0193 * lin[0] + 0.1192 * lin[1] + 0.9505 * lin[2]) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def delta_e(c1: str, c2: str) -> float:
    a, b = _lab(c1), _lab(c2)
    return sum((p - q) ** 2 for p, q in zip(a, b, strict=True)) ** 0.5


def test_mark_colours_are_distinct_and_the_legend_shows_them(base, page):
    others = {f"{st} {part}": c for st, (fill, border, _) in STATUS_STYLE.items()
              for part, c in (("fill", fill), ("border", border))}
    others |= {"near miss matched": NEAR_MISS_MATCHED, "near miss blocker": NEAR_MISS_BLOCKER,
               "error NaN fill": HEAT_NAN}
    others |= {f"error heat {i}": c for i, c in enumerate(HEAT_FILLS)}
    assert delta_e(MARKS["selected"], MARKS["match"]) >= 30
    for mark, colour in MARKS.items():
        for what, other in others.items():
            assert delta_e(colour, other) >= 30, (mark, colour, what, other, delta_e(colour, other))
    # What the browser draws is these colours.
    open_graph(page, base + "/graph")
    # an op type the after pane has several of: the first is selected, the others are matches
    ops = pane(page, "after").evaluate("() => [...document.querySelectorAll('g.node[id^=\"fv-n-\"] text')].map(t => t.textContent)")
    op = next(o for o in ("MatMul", "Add", "Gather", "Reshape") if ops.count(o) >= 2)
    box = page.get_by_placeholder("Search: name or op type", exact=False)
    box.fill(op)
    box.press("Enter")
    wait_idle(page)
    after = pane(page, "after")
    after.wait_for_function("() => document.querySelector('g.node.fv-selected') && "
                            "document.querySelector('g.node.fv-match:not(.fv-selected)')")
    time.sleep(0.2)
    assert delta_e(_stroke(after, "fv-selected"), MARKS["selected"]) < 1
    assert delta_e(after.evaluate("""() => getComputedStyle(document.querySelector(
        'g.node.fv-match:not(.fv-selected) > path, g.node.fv-match:not(.fv-selected) > polygon')).stroke"""),
        MARKS["match"]) < 1
    before = pane(page, "before")
    before.wait_for_function("() => document.querySelector('g.node.fv-linked')")
    assert delta_e(_stroke(before, "fv-linked"), MARKS["selected"]) < 1
    # One legend, listing the marks drawn now with the same colours.
    legend = page.locator(".fv-legend").first
    text = legend.inner_text()
    for title in ("fused / new", "removed", "changed", "selected", "search match"):
        assert title in text, text
    swatches = page.evaluate("""() => [...document.querySelectorAll('.fv-legend .fv-sw.fv-mark')].map(
        e => getComputedStyle(e).borderTopColor)""")
    assert any(delta_e(s, MARKS["selected"]) < 1 for s in swatches), swatches
    assert any(delta_e(s, MARKS["match"]) < 1 for s in swatches), swatches
    screenshot(page, "viewer_marks_legend")
