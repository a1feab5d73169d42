"""Benchmark page: choose variants and settings, run with progress and cancel, charts, downloads.

The page lays out and calls: the variants are built by :mod:`fusionviz.experiment.plan` (one
builder for every front end), and the run goes on in a background thread started by
:mod:`fusionviz.experiment.jobs` (the bench engine itself starts one worker process per variant
and queues runs machine-wide). The page polls the job, so a click on *Cancel* reruns the page,
sets the job's cancel event, and the engine stops its workers.

Rules:

1. The onnxruntime level is one setting of the run (:mod:`fusionviz.experiment.plan` rule 1);
   the chart titles name it.
2. Comparisons across onnxruntime levels are their own variants: the reference (the original
   under level 'all', on by default, what a user gets from onnxruntime alone) and, when asked,
   the original under every level.
3. Every comparison bar is a paired ratio with its 95% interval, in the words of
   :mod:`fusionviz.bench.claims` ("2.6× faster (61% less time)"; "no measurable difference"
   when the interval holds 1). The table beside a what-if chart is made from the chart's own
   effects (:func:`fusionviz.bench.whatif.effects_table`): the same numbers.
4. The inputs are the Model page's (the same plan as verification).
5. A variant is its model and its settings (:mod:`fusionviz.bench.identity`): the same variant
   asked for twice (the current selection and the last cumulative step, say) is measured once
   and shown under both labels.
6. The results table compares every variant with the reference and with the original at the
   same settings (the same onnxruntime level, or the same other runtime).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import pandas as pd
import streamlit as st

from fusionviz.experiment import jobs
from fusionviz.experiment.plan import REFERENCE_LEVEL, Plan, reference_label
from fusionviz.ortlevels import LEVELS
from fusionviz.ui import cache, common, state

logger = logging.getLogger(__name__)


def bench_feeds(loaded: Any) -> dict | None:
    """Rule 4: the inputs every variant is timed on: the user's data when given, else the plan's
    ``normal`` set (the same inputs verification uses); None when there is no plan."""
    plan = state.input_plan(loaded).plan
    if plan is None:
        return None
    return plan.feeds("user" if plan.user_data else "normal")


def _cancel() -> None:
    job = st.session_state.get(state.BENCH_JOB)
    if job is not None:
        job.stop()


def _providers() -> list[str]:
    try:
        import onnxruntime as ort

        provs = [p for p in ort.get_available_providers() if p != "AzureExecutionProvider"]
        # CPU first: it is what the default settings measure.
        return sorted(provs, key=lambda p: p != "CPUExecutionProvider") or ["CPUExecutionProvider"]
    except Exception:  # noqa: BLE001
        return ["CPUExecutionProvider"]


def _form(n_passes: int) -> Plan:
    st.markdown("**Variants**")
    c = st.columns(3)
    current = c[0].checkbox(f"Current selection ({n_passes} pass{'es' if n_passes != 1 else ''})",
                            **state.keep("bench_v_current", True))
    original = c[0].checkbox("Original", **state.keep("bench_v_original", True))
    reference = c[0].checkbox(f"Reference: original under onnxruntime level '{REFERENCE_LEVEL}'",
                              **state.keep("bench_v_reference", True),
                              help="What onnxruntime's own optimizer gives with no fusionviz pass: the "
                                   "table and charts compare every variant with it.")
    levels = c[1].checkbox("Original under every ORT level", **state.keep("bench_v_levels", False),
                           help="off, basic, extended, layout, all: a separate comparison of onnxruntime's "
                                "own levels.")
    refs = c[1].checkbox("Reference optimizers", **state.keep("bench_v_refs", False),
                         help="onnxslim, onnxsim, onnxscript's optimizer, ORT's saved graph: whole pipelines.")
    cum = c[2].checkbox("Per pass: cumulative", **state.keep("bench_v_cumulative", False),
                        help="original, +p1, +p1+p2, ...: what each pass adds given the ones before it.")
    loo = c[2].checkbox("Per pass: leave one out", **state.keep("bench_v_loo", False),
                        help="all passes, and all but p for each p: what the result loses without p.")
    st.markdown("**Settings of the run**")
    s = st.columns(5)
    level = s[0].selectbox("ORT optimization level", LEVELS, **state.keep(state.LEVEL_WIDGET, "off"),
                           help="One setting for the whole run: the current selection, the original and every "
                                "per-pass step run under it, so steps differ only by passes. 'off' (default) "
                                "measures exactly what your passes do.")
    threads = s[1].number_input("Threads", min_value=1, max_value=64, step=1, **state.keep("bench_threads", 1))
    provs = _providers()
    provider = s[2].selectbox("Execution provider", provs, **state.keep("bench_provider", provs[0]))
    min_time = s[3].slider("Seconds per variant", 0.2, 10.0, step=0.2, **state.keep("bench_min_time", 1.0))
    denormal = s[4].checkbox("Denormals as zero", **state.keep("bench_denormal", False))
    profile = s[4].checkbox("Profile by op type", **state.keep("bench_profile", False))
    backends = _backend_choice("bench_backends",
                               "The original and the current selection, also compiled by each chosen runtime "
                               "(its own optimizer, flush-to-zero as set here), in the same interleaved run. TVM untuned is "
                               "tens of times slower than onnxruntime on a CPU.")
    return Plan(current, original, reference, levels, refs, cum, loo, level, int(threads), provider, denormal,
                float(min_time), profile, backends)


def _backend_choice(key: str, help_text: str) -> tuple[str, ...]:
    """Compilers besides onnxruntime to measure on, from the ones usable here (the others are
    listed with the reason they are not)."""
    from fusionviz.backends.registry import TITLES

    usable, missing = cache.backend_availability()
    picked = st.multiselect("Also on other runtimes", [b for b in usable if b != "ort"], format_func=lambda b: TITLES.get(b, b),
                            **state.keep(key, []), help=help_text)
    if missing:
        st.caption("Not available here: " + "; ".join(f"{TITLES.get(b, b)} ({why})" for b, why in missing.items()))
    return tuple(picked)


def _start(plan: Plan, loaded: Any, result: Any) -> None:
    inputs = state.input_plan(loaded)
    context = {"model": loaded.name, "sha256": loaded.sha256, "passes": state.passes(),
               "plan": dataclasses.asdict(plan), "pipeline": result.as_dict(),
               "settings": {"level": plan.level, "threads": int(plan.threads), "provider": plan.provider,
                            "denormal_as_zero": plan.denormal, "seconds_per_variant": plan.min_time_s},
               "inputs": inputs.plan.describe_lines() if inputs.plan is not None else []}
    st.session_state[state.BENCH_JOB] = jobs.start_bench(plan, state.passes(), result, state.shapes(),
                                                         bench_feeds(loaded), context)


def _poll(job: jobs.Job) -> None:
    bar = st.progress(job.fraction, text=job.message)
    if job.kind == "bench":
        st.button("Cancel", icon=":material/stop:", key="bench_cancel", on_click=_cancel)
    else:
        st.caption("The search stops by itself when its time budget is spent.")
    while job.alive():
        bar.progress(job.fraction, text=f"{job.message} · {time.monotonic() - job.started:.0f} s")
        time.sleep(0.25)
    bar.progress(1.0, text="done")
    st.session_state[state.BENCH_JOB] = None
    if job.results is not None and job.kind == "tune":
        st.session_state["fv_tune"] = {"result": job.results, "sha256": job.context.get("sha256")}
    elif job.results is not None:
        st.session_state[state.BENCH] = {"results": job.results, "context": job.context}
    elif job.error:
        st.session_state["fv_bench_error"] = job.error
    st.rerun()


SAME_SETTINGS = "vs original, same settings"


def _vs_original(r: Any, results: list, originals: list[str] | None) -> str | None:
    """Rule 6: ``r`` against the original measured under exactly ``r``'s settings."""
    from fusionviz.bench import identity, whatif

    if originals is None or r.stats is None:
        return None
    if r.label in originals:
        return "(the original)"
    base = identity.original_at(results, originals, r.settings)
    if base is None:
        return f"not measured (no original under {r.settings.describe()})"
    return whatif.effect(r, base).describe()


def results_table(results: list, level: str = "off", originals: list[str] | None = None) -> pd.DataFrame:
    """One row per variant: latency statistics, the paired ratio to the reference and to the
    original at the same settings, memory, verification, error (rules 2, 3 and 6).

    Args:
        results: the run's results.
        level: the run's onnxruntime level.
        originals: labels of the variants whose model is the original
            (:meth:`fusionviz.bench.identity.Measured.labels_of`); None leaves the same-settings
            column empty.
    """
    from fusionviz.bench import whatif

    ref_label = reference_label(level)
    ref = whatif.reference_result(results, REFERENCE_LEVEL)
    rows = []
    for r in results:
        st_ = r.stats
        v = r.verify or {}
        vs_ref = None
        if ref is not None and st_ is not None and r.label != ref.label:
            vs_ref = whatif.effect(r, ref).describe()
        rows.append({
            "variant": r.label,
            "median ms": round(st_.median_ms, 3) if st_ else None,
            f"vs {ref_label}": "reference" if ref is not None and r.label == ref.label else vs_ref,
            SAME_SETTINGS: _vs_original(r, results, originals),
            "p10 ms": round(st_.p10_ms, 3) if st_ else None,
            "p90 ms": round(st_.p90_ms, 3) if st_ else None,
            "95% CI ms": f"{st_.ci_low_ms:.3f}–{st_.ci_high_ms:.3f}" if st_ else None,
            "runs": st_.n if st_ else None,
            "stable": ("noisy" if st_.unstable else "ok") if st_ else None,
            "peak RSS MB": r.memory.get("rss_run_mb"),
            "static peak": common.fmt_bytes(r.memory.get("static_peak_reuse_bytes"))
            if r.memory.get("static_peak_reuse_bytes") is not None else None,
            "verify": ("equal" if v.get("ok") else ("differs" if v.get("report_only") else "DIFFERENT")) + (
                f" {v.get('max_rel_diff', 0):.1e}" if v.get("max_rel_diff") is not None else "") if v else "",
            "settings": r.settings.describe(),
            "error": r.error or "",
        })
    return pd.DataFrame(rows)


def effects_frame(effects: list, results: list) -> pd.DataFrame:
    """Rule 3: the table beside a what-if chart, from the chart's own effects."""
    from fusionviz.bench import whatif

    rows = whatif.effects_table(effects, results)
    for row in rows:
        b = row.pop("Δ static intermediates (bytes)")
        row["Δ static intermediates"] = common.fmt_bytes(b) if b is not None else None
    return pd.DataFrame(rows)


def _per_pass(ok: list) -> None:
    """Rule 1 and 3: the cumulative and leave-one-out effects, each at the run's one level; each
    chart with its table, both from one list of effects."""
    from fusionviz import charts
    from fusionviz.bench import whatif

    cum, cum_settings = whatif.cumulative_effects(ok)
    if cum:
        st.plotly_chart(charts.effect_bars(cum, whatif.run_title("cumulative", cum_settings),
                                           "time change vs the step before (%, 95% interval of the paired ratio)"),
                        width="stretch", key="chart_waterfall")
        st.dataframe(effects_frame(cum, ok), hide_index=True, width="stretch", key="table_cumulative")
    else:
        st.caption("Tick 'Per pass: cumulative' and run again to see what each pass adds.")
    loo, loo_settings = whatif.leave_one_out_effects(ok)
    if loo:
        st.plotly_chart(charts.effect_bars(loo, whatif.run_title("leave-one-out", loo_settings),
                                           "time without the pass vs all passes (%; above 0: the pass helps)",
                                           better="higher"), width="stretch", key="chart_loo")
        st.dataframe(effects_frame(loo, ok), hide_index=True, width="stretch", key="table_loo")


def _levels(ok: list, level: str) -> None:
    """Rule 2: onnxruntime's levels as their own comparison, against the original at the run's level."""
    from fusionviz import charts
    from fusionviz.bench import whatif

    eff = whatif.level_effects(ok)
    if not eff:
        st.caption("Tick 'Original' with the reference or 'Original under every ORT level' to compare "
                   "onnxruntime's own levels.")
        return
    st.plotly_chart(charts.effect_bars(eff, f"The original under other onnxruntime levels, vs the original at "
                                            f"level '{level}'", "time change (%, 95% interval of the paired ratio)"),
                    width="stretch", key="chart_levels")


def _charts(results: list, context: dict) -> None:
    from fusionviz import charts

    ok = [r for r in results if r.stats is not None]
    if not ok:
        return
    level = (context.get("settings") or {}).get("level", "off")
    tabs = st.tabs(["Latency", "Per pass", "ORT levels", "Memory", "Where time goes", "Speed vs error",
                    "Tensor lifetimes"])
    with tabs[0], common.guard("drawing the latency chart"):
        st.plotly_chart(charts.latency_box(ok, title=f"Latency per variant (run at onnxruntime level '{level}'; "
                                                     "ORT-level variants as labelled)"),
                        width="stretch", key="chart_latency")
    with tabs[1], common.guard("drawing the per-pass chart"):
        _per_pass(ok)
    with tabs[2], common.guard("drawing the levels chart"):
        _levels(ok, level)
    with tabs[3], common.guard("drawing the memory chart"):
        st.plotly_chart(charts.memory_bars(ok), width="stretch", key="chart_memory")
    with tabs[4], common.guard("drawing the profile chart"):
        prof = [r for r in ok if r.profile]
        if len(prof) >= 2:
            a, b = prof[0], prof[-1]
            st.plotly_chart(charts.optype_time_bars(a.profile, b.profile, labels=(a.label, b.label)),
                            width="stretch", key="chart_optype")
        else:
            st.caption("Tick 'Profile by op type' and run at least two variants to see where time goes.")
    with tabs[5], common.guard("drawing the speed-vs-error chart"):
        pts = [{"label": r.label, "median_ms": r.stats.median_ms,
                "max_rel_diff": (r.verify or {}).get("max_rel_diff")} for r in ok]
        st.plotly_chart(charts.speed_vs_error(pts), width="stretch", key="chart_speed_error")
    with tabs[6], common.guard("drawing the tensor lifetimes"):
        loaded = state.model()
        result = common.current_pipeline(progress=False)
        key = (*common.pipeline_key(loaded, state.passes()), len(result.snapshots) - 1)
        plan = cache.memory_plan(key, state.shapes_key(), result.final)
        st.caption("Static memory plan of the current selection: each bar is one activation, from the "
                   "step that produces it to its last use.")
        st.plotly_chart(charts.lifetime_gantt(plan), width="stretch", key="chart_gantt")


def _downloads(loaded: Any, bench: dict | None) -> None:
    """The optimized model and the report, as on the Passes page."""
    st.subheader("Export")
    result = common.current_pipeline(progress=False)
    common.exports(loaded, result, common.verification(loaded, result), bench)


def _apply_tune(res: Any) -> None:
    from fusionviz.backends.registry import TITLES

    state.set_passes(list(res.best.passes))
    widgets = st.session_state.setdefault(state.WIDGETS, {})
    widgets["bench_denormal"] = bool(res.best.denormal_as_zero)
    if res.best.backend == "ort":
        widgets["bench_level"] = res.best.level
        where = f"benchmark level set to '{res.best.level}'"
    else:
        widgets["bench_backends"] = [res.best.backend]
        where = f"the benchmark also runs on {TITLES.get(res.best.backend, res.best.backend)}"
    st.session_state[state.MESSAGE] = f"Auto what-if winner applied: {len(res.best.passes)} passes; {where}."


def _tune(loaded: Any, busy: bool) -> None:
    try:
        from fusionviz import tune  # noqa: F401
    except ImportError:
        return
    with st.expander("Auto what-if: search for the fastest variant that still verifies",
                     expanded=bool(st.session_state.get("fv_tune_open"))):
        st.caption("Starts from every exact pass, greedily drops any pass whose removal is faster, then "
                   "tries each onnxruntime level (and denormals-as-zero) and each chosen runtime; only verified "
                   "variants can win, and the winner is measured again against each runtime alone.")
        backends = _backend_choice("tune_backends", "Runtimes the search may recommend besides onnxruntime.")
        c = st.columns([2, 2, 1])
        budget = c[0].slider("Time budget (s)", 20, 600, step=10, **state.keep("tune_budget", 120))
        per = c[1].slider("Seconds per variant", 0.2, 3.0, step=0.1, **state.keep("tune_min_time", 0.5))
        if c[2].button("Run the search", key="tune_run", disabled=busy, type="primary"):
            st.session_state[state.BENCH_JOB] = jobs.start_tune(loaded.proto, state.shapes(), float(budget),
                                                                float(per), bench_feeds(loaded), backends,
                                                                {"sha256": loaded.sha256})
            st.rerun()
        saved = st.session_state.get("fv_tune")
        if not saved or saved.get("sha256") != loaded.sha256:
            return
        res = saved["result"]
        (st.success if res.established else st.info)(res.claim())
        if res.recommendation:
            st.caption(res.recommendation)
        for note in res.backend_notes.values():
            st.warning(note)
        steps = pd.DataFrame([s.as_dict() for s in res.steps])
        if not steps.empty:
            steps = steps[["phase", "label", "median_ms", "verified", "chosen", "note"]]
            st.markdown("**Search path**")
            st.bar_chart(steps.reset_index(), x="index", y="median_ms", height=220)
            st.dataframe(steps, width="stretch")
        if res.inactive_passes:
            st.caption("Passes that changed nothing on this model: " + ", ".join(res.inactive_passes))
        st.button("Use this selection", key="tune_apply", on_click=_apply_tune, args=(res,),
                  icon=":material/done_all:")


def _inputs_caption(loaded: Any) -> None:
    """Rule 4: say which inputs every variant is fed (set on the Model page)."""
    inputs = state.input_plan(loaded)
    if inputs.error:
        st.warning(f"Inputs: {state.scrub(inputs.error)}")
    if inputs.plan is not None:
        st.caption("Inputs (set on the Model page): " + "; ".join(
            f"`{c.name}` {c.dtype}[{','.join(map(str, c.dims))}]" for c in inputs.plan.choices))


def body() -> None:
    """The Benchmark page."""
    loaded = common.require_model()
    st.title("Benchmark")
    st.caption("Each variant runs in its own worker process; variants are interleaved in rounds so "
               "machine drift hits all alike; warm-up runs are discarded.")
    result = common.current_pipeline()
    _inputs_caption(loaded)
    job = st.session_state.get(state.BENCH_JOB)
    plan = _form(len(state.passes()))
    if job is not None and (job.alive() or job.results is not None or job.error):
        _poll(job)
        return
    _tune(loaded, busy=False)
    if st.button("Run benchmark", icon=":material/play_arrow:", key="bench_run", type="primary"):
        st.session_state["fv_bench_error"] = None
        _start(plan, loaded, result)
        _poll(st.session_state[state.BENCH_JOB])
        return
    err = st.session_state.get("fv_bench_error")
    if err:
        st.error(state.scrub(err))
    bench = st.session_state.get(state.BENCH)
    if bench and bench["context"].get("sha256") == loaded.sha256:
        results, context = bench["results"], bench["context"]
        for k, note in (context.get("notes") or {}).items():
            st.caption(f"{k}: {note}")
        for r in results:
            if r.error:
                st.warning(f"{r.label}: {state.scrub(r.error)}")
        _charts(results, context)
        level = (context.get("settings") or {}).get("level", "off")
        st.dataframe(results_table(results, level, context.get("originals")), hide_index=True, width="stretch",
                     key="bench_table")
        with common.guard("preparing the downloads"):
            _downloads(loaded, bench)
    else:
        st.info("Choose variants and press Run. A 1-second run of three variants takes about 15 s.")
        with common.guard("preparing the downloads"):
            _downloads(loaded, None)


def render() -> None:
    """Draw the page under the error guard."""
    common.page("Benchmark", body)


if __name__ == "__main__":
    render()
