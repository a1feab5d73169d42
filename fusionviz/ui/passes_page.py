"""Passes (what-if) page: every pass as a toggle, presets, live deltas, change list, verification,
exports.

Each pass's outcome is one status (:attr:`fusionviz.passes.pipeline.PassReport.status`):
applied, unchanged, skipped (nothing it could act on), declined (its result broke the validity
rule and was rolled back: the reason is shown), failed (it raised: the passes before it are
named). Verification names the input set and output that failed and lists the sets used.
"""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd
import streamlit as st

from fusionviz import errors
from fusionviz.ui import bisect_view, cache, common, nearmiss_view, state

logger = logging.getLogger(__name__)

CATEGORY_TITLES = {
    "simplify": "Simplify",
    "fuse": "Fuse",
    "layout-memory": "Layout & memory",
    "precision": "Precision (changes the numbers)",
}

def _all():
    from fusionviz.passes import all_passes

    return all_passes()


def ort_basic_passes() -> list[str]:
    """Passes that do what onnxruntime's BASIC level does: those that declare it
    (``mirrors_ort = "basic"`` on the pass class)."""
    from fusionviz.passes import registry

    return registry.mirroring("basic")


def presets() -> dict[str, tuple[str, list[str]]]:
    """Preset id -> (label, pass names)."""
    ps = _all()
    by_cat = lambda *cats: [p.name for p in ps if p.category.value in cats]  # noqa: E731
    return {
        "none": ("None", []),
        "simplify": ("Simplify only", by_cat("simplify")),
        "fusions": ("All fusions", by_cat("simplify", "fuse")),
        "everything": ("Everything (exact)", [p.name for p in ps if p.exact]),
        "ort_basic": ("What ORT basic does", ort_basic_passes()),
    }


def _apply_preset(pid: str) -> None:
    label, names = presets()[pid]
    state.set_passes(names)
    st.session_state[state.MESSAGE] = f"Preset '{label}': {len(names)} passes selected."


def _toggle(name: str) -> None:
    on = bool(st.session_state[f"pass_{name}"])
    names = set(state.passes())
    (names.add if on else names.discard)(name)
    state.set_passes(sorted(names))


def _preset_row() -> None:
    cols = st.columns(6)
    for i, (pid, (label, names)) in enumerate(presets().items()):
        cols[i].button(f"{label} ({len(names)})", key=f"preset_{pid}", on_click=_apply_preset,
                       args=(pid,), width="stretch")
    _tune_button(cols[5])


def _tune_button(col) -> None:
    try:
        from fusionviz import tune  # noqa: F401
    except ImportError:
        return
    if col.button("Auto what-if", icon=":material/bolt:", key="tune_btn", width="stretch",
                  help="Search pass subsets × ORT level for the fastest variant that still verifies."):
        st.session_state["fv_tune_open"] = True
        common.switch("bench")


def _toggles() -> None:
    selected = set(state.passes())
    groups: dict[str, list] = {}
    for p in _all():
        groups.setdefault(p.category.value, []).append(p)
    for cat, ps in groups.items():
        on = sum(p.name in selected for p in ps)
        with st.expander(f"{CATEGORY_TITLES.get(cat, cat)} — {on}/{len(ps)} on", expanded=cat != "precision"):
            for p in ps:
                key = f"pass_{p.name}"
                state.seed(key, p.name in selected)
                st.toggle(p.title, key=key, on_change=_toggle, args=(p.name,), help=_explain(p, cat))


def _explain(p, cat: str) -> str:
    """A pass's tooltip: what it does and why it is faster (one element per pass: a popover per
    pass made every toggle redraw some 150 elements before the graph)."""
    warn = "" if p.exact else "\n\n**Changes the numbers**: verification reports the error."
    if p.not_in_all:
        warn += f"\n\n**Not in --all**: {p.not_in_all}."
    return f"**{p.title}** · `{p.name}` · {cat}\n\n{p.explain or 'No explanation yet.'}{warn}"


def _memory_delta(loaded, result):
    try:
        key0 = (*common.pipeline_key(loaded, state.passes()), 0)
        keyn = (*common.pipeline_key(loaded, state.passes()), len(result.snapshots) - 1)
        m0 = cache.memory_plan(key0, state.shapes_key(), result.original)
        m1 = cache.memory_plan(keyn, state.shapes_key(), result.final)
        return m0, m1
    except ImportError:
        return None, None
    except errors.FusionvizError as exc:
        st.caption(f"Memory plan not available: {exc}")
        return None, None


def _metrics(loaded, result, cols) -> None:
    """Node and static-memory deltas into the metric columns drawn at the top."""
    d = result.nodes_after - result.nodes_before
    cols[0].metric("Nodes", f"{result.nodes_after:,}", f"{d:+,} vs {result.nodes_before:,}" if d else None,
                   delta_color="inverse")
    m0, m1 = _memory_delta(loaded, result)
    if m0 is not None and m1 is not None:
        a0, a1 = m0.sum_intermediate_bytes, m1.sum_intermediate_bytes
        cols[1].metric("Intermediate tensors", common.fmt_bytes(a1),
                       f"{(a1 - a0) / max(a0, 1):+.0%} ({common.fmt_bytes(a1 - a0)})" if a1 != a0 else None,
                       delta_color="inverse",
                       help="Sum of the bytes of every intermediate tensor (static plan).")
        p0, p1 = m0.peak_bytes_reuse, m1.peak_bytes_reuse
        cols[2].metric("Peak activations (reuse)", common.fmt_bytes(p1),
                       f"{(p1 - p0) / max(p0, 1):+.0%}" if p1 != p0 else None, delta_color="inverse",
                       help="Peak live activation bytes over the execution order with buffer reuse.")
    else:
        cols[1].metric("Intermediate tensors", "-")
        cols[2].metric("Peak activations (reuse)", "-")


def _verify_metric(v: Any, slot: Any) -> None:
    if v is None:
        slot.metric("Verification", "—", help="No pass selected: nothing to verify.")
    elif v.error:
        slot.metric("Verification", "not run", help=state.scrub(v.summary()))
    elif v.ok:
        slot.metric("Verification", "equal", f"max rel {v.max_rel_diff:.1e}", delta_color="off",
                    delta_arrow="off", icon=":material/check_circle:", help=v.summary())
    else:
        slot.metric("Verification", "differs" if v.report_only else "DIFFERENT",
                    f"max rel {v.max_rel_diff:.1e}", delta_color="off", delta_arrow="off",
                    icon=":material/warning:" if v.report_only else ":material/error:", help=v.summary())


def verify_rows(v: Any) -> pd.DataFrame:
    """One row per input set and output of a VerifyResult."""
    return pd.DataFrame([{
        "input set": o.input_set, "output": o.name, "shape": "[" + ", ".join(map(str, o.shape)) + "]",
        "max abs": f"{o.max_abs_diff:.2e}", "max rel": f"{o.max_rel_diff:.2e}", "cosine": f"{o.cosine:.6f}",
        "beyond tolerance": f"{o.mismatches:,} of {o.size:,}" if o.size else "-",
        "new NaN/Inf": o.new_nonfinite, "verdict": "equal" if o.ok else "differs",
    } for o in v.outputs])


def _verify_box(v: Any) -> None:
    """The verification verdict: which input set and output failed, the sets used, per-output figures."""
    st.subheader("Verification")
    if v is None:
        st.caption("No pass selected: nothing to verify.")
        return
    sets = ", ".join(v.input_sets) or "none"
    if v.error:
        st.warning(f"Not verified: {state.scrub(v.error)}")
    elif v.ok:
        st.success(f"Equal: every output matches the original on the input sets {sets} "
                   f"(max abs {v.max_abs_diff:.1e}, max rel {v.max_rel_diff:.1e}; tolerance "
                   f"atol {v.atol:g} + rtol {v.rtol:g}·|original| + noise floor).")
    else:
        fail = v.first_failure
        text = fail.describe() if fail is not None else v.summary()
        if v.report_only:
            st.warning(f"Differs (precision passes change the numbers; reported, not failed): {text}.")
        else:
            st.error(f"DIFFERENT: {text}.")
    st.caption(f"Input sets used: {sets}. Both models run in onnxruntime with its own optimizations off."
               + "".join(f" Set '{name}' skipped: {why}." for name, why in v.skipped_sets))
    if v.outputs:
        with st.expander("Per input set and output", expanded=not v.ok):
            st.dataframe(verify_rows(v), hide_index=True, width="stretch")


def _change_target(ch) -> str | None:
    return (ch.outputs[0] if ch.outputs else None) or (ch.inputs[0] if ch.inputs else None)


#: At least this many changes of one kind and one op pattern are one line, their sites a list.
GROUP_MIN = 3


def group_changes(changes: Any) -> list[tuple[str, list[tuple[int, Any]]]]:
    """The changes of a pass in their order, those of one kind and op pattern (eight
    ``Add + LayerNormalization → SkipLayerNormalization``) together: ``(pattern, [(index, change)])``
    per group, at the place of its first change."""
    groups: dict[tuple, list[tuple[int, Any]]] = {}
    for j, ch in enumerate(changes):
        key = (ch.kind.value, tuple(ch.in_ops), tuple(ch.out_ops)) if (ch.in_ops or ch.out_ops) else ("#", j)
        groups.setdefault(key, []).append((j, ch))
    out = []
    for key, members in groups.items():
        if key[0] == "#":
            pattern = ""
        else:
            pattern = f"`{key[0]}` {' + '.join(key[1]) or '-'} → {' + '.join(key[2]) or '-'}"
        out.append((pattern, members))
    return out


def _change_row(ch: Any, k: int, j: int, where: Any = None) -> None:
    """One change with its focus button (``where``: the container, default the page)."""
    box = where if where is not None else st
    c1, c2 = box.columns([8, 1], vertical_alignment="center")
    c1.markdown(f"`{ch.kind.value}` {ch.describe().split(': ', 1)[-1]}")
    target = _change_target(ch)
    if target and c2.button("", icon=":material/center_focus_strong:", key=f"chg_{k}_{j}",
                            help="Focus the graph on this change"):
        st.session_state[state.FOCUS] = target
        st.session_state[state.SELECTED] = target
        st.session_state[state.COMPARE] = f"step:{k}"
        common.switch("graph", focus=target)


def _change_list(rep: Any, k: int, limit: int = 60) -> None:
    """The changes of step ``k``: many of one kind and pattern are one line whose sites open in a
    popover, the others one line each."""
    for pattern, members in group_changes(rep.changes[:limit]):
        if len(members) < GROUP_MIN or not pattern:
            for j, ch in members:
                _change_row(ch, k, j)
            continue
        c1, c2 = st.columns([8, 1], vertical_alignment="center")
        c1.markdown(f"**{len(members)} ×** {pattern}")
        with c2.popover(f"{len(members)}", help="The sites, each with a button that focuses the graph on it"):
            for j, ch in members:
                _change_row(ch, k, j)


STATUS_BADGE = {
    "applied": ":green-badge[applied]",
    "unchanged": ":gray-badge[unchanged]",
    "skipped": ":gray-badge[skipped]",
    "declined": ":orange-badge[declined]",
    "failed": ":red-badge[failed]",
}


def _status_summary(result: Any) -> None:
    """Declined and failed passes, named above the list (they matter without opening it)."""
    declined = [r for r in result.reports if r.status == "declined"]
    failed = [r for r in result.reports if r.status == "failed"]
    for note in getattr(result, "notes", ()):
        st.info(state.scrub(note), icon=":material/info:")
    for r in declined:
        st.warning(f"**{r.title}** (`{r.name}`) was declined and rolled back: {state.scrub(r.declined)}. "
                   "The other passes went on.", icon=":material/undo:")
    for r in failed:
        before = ", ".join(r.after) or "no other pass"
        reason = state.scrub(r.error or "")
        st.warning(f"**{r.title}** (`{r.name}`) failed; its result was discarded and the other passes went on (it ran after: {before}): {reason}",
                   icon=":material/warning:")


def _status_line(result: Any) -> None:
    """One line under the metrics when a pass was declined or failed (details in the list below)."""
    odd = [r for r in result.reports if r.status in ("declined", "failed")]
    if odd:
        names = ", ".join(f"{r.title} ({r.status})" for r in odd)
        st.warning(f"{names}: the model is as if {'it' if len(odd) == 1 else 'they'} had not run. "
                   "Why: see *What each pass did* below.", icon=":material/info:")


def _changes(result: Any) -> None:
    st.subheader("What each pass did")
    if not result.reports:
        st.caption("No pass selected.")
        return
    _status_summary(result)
    counts: dict[str, int] = {}
    for rep in result.reports:
        counts[rep.status] = counts.get(rep.status, 0) + 1
    st.caption(" · ".join(f"{n} {k}" for k, n in counts.items()))
    for k, rep in enumerate(result.reports, start=1):
        n = len(rep.changes)
        near = rep.near_miss_total
        head = (f"{k}. {rep.title} {STATUS_BADGE.get(rep.status, rep.status)} — applied {n}"
                + (f" · near misses {near}" if near else "")
                + f" · nodes {rep.nodes_before} → {rep.nodes_after} · {rep.seconds * 1000:.0f} ms")
        with st.expander(head, expanded=False):
            if rep.status == "failed":
                st.warning(f"This pass failed and its result was discarded (it ran after: {', '.join(rep.after) or 'no other pass'}): "
                           f"{state.scrub(rep.error or '')}")
            elif rep.status == "declined":
                st.warning(f"Declined: {state.scrub(rep.declined or '')}. The pass's result was rolled back.")
            elif not n and rep.skip_reason:
                st.caption(f"Found nothing to change in this model ({rep.skip_reason}).")
            elif not n and not near:
                st.caption("Found nothing to change in this model: no site got past the first op of any of "
                           "this pass's patterns.")
            _near_misses(rep, k)
            _change_list(rep, k)
            if n > 60:
                st.caption(f"... and {n - 60} more (download the report below for all of them).")


def _near_misses(rep: Any, step: int) -> None:
    """Where the pass almost rewrote the graph: blocking node, reason, hint, and a button that
    draws it on the Graph page (``nearmiss_view``)."""
    if not rep.near_misses:
        return
    more = rep.near_miss_total - len(rep.near_misses)
    st.markdown(f"**Near misses** — {rep.near_miss_total} site{'s' if rep.near_miss_total != 1 else ''} where "
                "the rewrite almost fired" + (f" (the {len(rep.near_misses)} deepest shown)" if more else "") + ":")
    for j, near in enumerate(rep.near_misses[:20]):
        c1, c2 = st.columns([8, 1], vertical_alignment="center")
        where = f"at `{near.blocker}`: " if near.blocker else ""
        hint = f" → *{near.hint}*" if near.hint else ""
        c1.markdown(f":violet-badge[near miss] {where}{near.reason}{hint}")
        if near.nodes and c2.button("", icon=":material/troubleshoot:", key=f"near_{step}_{j}",
                                    help="Draw this near miss on the Graph page"):
            nearmiss_view.show(f"{rep.name}:{j}", step)
            common.switch("graph", nearmiss=f"{rep.name}:{j}", focus=None)
    if len(rep.near_misses) > 20:
        st.caption(f"... and {len(rep.near_misses) - 20} more on the Graph page's near-miss picker "
                   "and in the report.")


def _graph(loaded, result) -> None:
    key = (*common.pipeline_key(loaded, state.passes()), "final")
    diff = cache.diff(key, result.original, result.final)
    common.legend(getattr(diff, "counts", None))
    rendered = cache.render(key, "after", common.render_options(focus=None), result.final, diff)
    st.caption(f"After the selected passes: {rendered.drawn} of {rendered.total} nodes drawn; "
               "colours compare with the original.")
    clicked = common.show_graph(rendered, key="passes_graph", height=640)
    if clicked is not None:
        kind, value = clicked
        if kind == "scope":
            common.toggle_scope(value)
            st.rerun()
        st.session_state[state.SELECTED] = value
        if st.button(f"Details of {value} on the Graph page", key="passes_to_graph",
                     icon=":material/arrow_forward:"):
            st.session_state[state.FOCUS] = value
            common.switch("graph", focus=value)


def body() -> None:
    """The Passes page."""
    loaded = common.require_model()
    st.title("Passes: what if?")
    st.caption("Switch passes on and off; they always run in the registry's canonical order. "
               "The graph, node count and static memory update live.")
    _preset_row()
    result = common.current_pipeline()
    # The graph is drawn first; the metrics (static memory plan, verification) fill in after it.
    top = st.columns(4)
    slots = [c.empty() for c in top]
    d = result.nodes_after - result.nodes_before
    slots[0].metric("Nodes", f"{result.nodes_after:,}", f"{d:+,} vs {result.nodes_before:,}" if d else None,
                    delta_color="inverse")
    for i, label in ((1, "Intermediate tensors"), (2, "Peak activations (reuse)"), (3, "Verification")):
        slots[i].metric(label, "…")
    _status_line(result)
    left, right = st.columns([2, 3])
    # The graph goes out before the toggles: the browser draws what the person waits for first.
    with right, common.guard("drawing the graph"):
        _graph(loaded, result)
    with left:
        _toggles()
    with common.guard("computing the memory plan"):
        _metrics(loaded, result, slots)
    with common.guard("listing the changes"):
        _changes(result)
    v = None
    with common.guard("verifying"):
        v = common.verification(loaded, result)
        _verify_metric(v, slots[3])
        _verify_box(v)
    with common.guard("bisecting"):
        bisect_view.selection(loaded, result, v)
        bisect_view.onnxruntime(loaded)
    with common.guard("preparing the downloads"):
        st.subheader("Export")
        bench = st.session_state.get(state.BENCH)
        common.exports(loaded, result, v, bench if _bench_matches(bench, loaded) else None)
    _prefetch(loaded, result)


def _bench_matches(bench: dict | None, loaded: Any) -> bool:
    """Whether a stored benchmark measured this model and this pass selection."""
    if not bench:
        return False
    ctx = bench.get("context") or {}
    return ctx.get("sha256") == loaded.sha256 and list(ctx.get("passes") or []) == state.passes()


def _prefetch(loaded, result) -> None:
    """Warm the cache for every selection one toggle away (passes that changed something first)."""
    active = [r.name for r in result.reports if r.changes]
    rest = [p.name for p in _all() if p.name not in active and p.exact]
    try:
        cache.prefetch_neighbours(loaded, state.passes(), state.shapes_key(),
                                  common.render_options(focus=None), active + rest)
    except Exception:  # noqa: BLE001 - speculative work never matters to the user
        logger.debug("prefetch not started", exc_info=True)


def render() -> None:
    """Draw the page under the error guard."""
    common.page("Passes", body)


if __name__ == "__main__":
    render()
