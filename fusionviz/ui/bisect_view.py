"""Which pass broke the numbers, on the Passes page: bisection of the selection when its outputs
differ (``fusionviz.bisect``), and of onnxruntime's own optimizers (``fusionviz.ortbisect``).

Both run on a click (they take several isolated runs), and their answers are kept in the session
for the model, selection and inputs they were run on. The selection's answer offers to turn the
responsible passes off; onnxruntime's names the ``disabled_optimizers`` that restore its outputs.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from fusionviz.ui import cache, state

BISECT = "fv_bisect"  # (key, BisectResult | str): the selection's bisection in this session
ORT_BISECT = "fv_ort_bisect"  # (key, OrtBisectResult | str): onnxruntime's, per level


def _kept(slot: str, key: tuple) -> Any:
    got = st.session_state.get(slot)
    return got[1] if got is not None and got[0] == key else None


def selection(loaded: Any, result: Any, v: Any) -> None:
    """Under the verification verdict: when the selection's outputs differ, find the passes responsible."""
    if v is None or v.report_only or not v.differs:
        return
    inputs = state.input_plan(loaded)
    if inputs.plan is None:
        return
    names = tuple(state.passes())
    key = (cache.keyed_sha(loaded.sha256), names, inputs.key, state.shapes_key())
    found = _kept(BISECT, key)
    st.markdown("**Which pass broke it?**")
    if found is None:
        st.caption("Bisection runs subsets of the selection in canonical order, each verified in an isolated "
                   "process, until the smallest set that still fails is found (about log2 of the passes that "
                   "changed the model, plus one).")
        if st.button("Find the pass", key="bisect_selection", icon=":material/troubleshoot:"):
            from fusionviz import bisect

            with st.spinner("Bisecting the selection..."):
                try:
                    found = bisect.bisect(loaded.proto, list(names), inputs.plan, first=(result, v),
                                          shapes={k: list(d) for k, d in state.shapes_key()} or None)
                except Exception as exc:  # noqa: BLE001 - one line on the page, the app keeps running
                    found = f"bisection could not run: {type(exc).__name__}: {exc}"
            st.session_state[BISECT] = (key, found)
            st.rerun()  # draw the answer without the button that asked for it
        return
    if isinstance(found, str):
        st.warning(state.scrub(found))
        return
    st.info(state.scrub(found.describe()), icon=":material/troubleshoot:")
    for name, why in found.reasons().items():
        st.markdown(f"- `{name}`: {state.scrub(why)}")
    if found.declined:
        rest = [n for n in names if n not in found.declined]
        label = f"Turn off {', '.join(found.declined)}"
        if st.button(label, key="bisect_turn_off", help="Keep every other selected pass."):
            state.set_passes(rest)
            st.rerun()


def onnxruntime(loaded: Any) -> None:
    """An expander: does onnxruntime's own level change this model's outputs, and through which optimizer?"""
    inputs = state.input_plan(loaded)
    if inputs.plan is None:
        return
    asked = st.session_state.get(ORT_BISECT)
    opened = asked is not None and asked[0][:2] == (loaded.sha256, inputs.key)
    with st.expander("onnxruntime's own optimizers: do they change the outputs?", expanded=opened):
        level = st.selectbox("Level judged against level off", ("all", "extended", "basic"), key="ort_bisect_level")
        key = (loaded.sha256, inputs.key, level)
        found = _kept(ORT_BISECT, key)
        if found is None:
            st.caption("Runs the original model at this level and at level off on the verification inputs, with a "
                       "fixed tolerance (no noise allowance); when they differ, finds the transformers (named by "
                       "onnxruntime's own log) whose removal through disabled_optimizers restores the outputs.")
            if not st.button("Check onnxruntime", key="ort_bisect_run"):
                return
            from fusionviz.ortbisect import bisect_ort

            with st.spinner(f"Bisecting onnxruntime's level {level}..."):
                try:
                    found = bisect_ort(loaded.proto, inputs.plan, level=level)
                except Exception as exc:  # noqa: BLE001 - one line on the page
                    found = f"could not run: {type(exc).__name__}: {exc}"
            st.session_state[ORT_BISECT] = (key, found)
            st.rerun()
        if isinstance(found, str):
            st.warning(state.scrub(found))
            return
        if found.error:
            st.warning(state.scrub(found.describe()))
        elif found.differs:
            base = found.baseline
            what = base.failure or (base.first.describe() if base.first is not None else "")
            st.error(f"Level {level} changes the outputs: {state.scrub(what)}.")
            text = state.scrub(found.describe())
            st.info(text[:1].upper() + text[1:])
            if found.restored:
                st.code(f"ort.InferenceSession(path, so, disabled_optimizers={list(found.disabled)!r})",
                        language="python")
        else:
            st.success(state.scrub(found.describe()))
        st.caption(f"Transformers that changed the graph at level {level}: {', '.join(found.candidates) or 'none'}.")
