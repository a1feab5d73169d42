"""Benchmark page: choose variants and settings, run with progress and cancel, charts, downloads.

The benchmark runs in a background thread of this server (the bench engine itself starts one
worker process per variant and queues runs machine-wide). The page polls the job, so a click on
*Cancel* reruns the page, sets the job's cancel event, and the engine stops its workers.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time

import pandas as pd
import streamlit as st

from fusionviz import errors
from fusionviz.ui import cache, common, state

logger = logging.getLogger(__name__)

LEVELS = ("off", "basic", "extended", "layout", "all")


@dataclasses.dataclass
class BenchJob:
    """A benchmark running in a background thread (mutable: the thread fills it in)."""

    cancel: threading.Event
    kind: str = "bench"  # "bench" | "tune"
    thread: threading.Thread | None = None
    fraction: float = 0.0
    message: str = "starting"
    results: list | None = None
    error: str | None = None
    context: dict = dataclasses.field(default_factory=dict)
    started: float = dataclasses.field(default_factory=time.monotonic)

    def alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()


@dataclasses.dataclass(frozen=True)
class Plan:
    """What to measure (plain data, so the thread never touches Streamlit)."""

    current: bool
    original: bool
    levels: bool
    references: bool
    cumulative: bool
    leave_one_out: bool
    level: str
    threads: int
    provider: str
    denormal: bool
    min_time_s: float
    profile: bool


def build_variants(plan: Plan, proto, passes: list[str], result, shapes: dict) -> tuple[list, dict]:
    """Variants for ``plan``; returns (variants, notes) where notes explain anything left out."""
    from fusionviz.bench import Settings, Variant

    settings = Settings(level=plan.level, threads=plan.threads, provider=plan.provider,
                        denormal_as_zero=plan.denormal)
    variants: list = []
    notes: dict[str, str] = {}
    labels: set[str] = set()

    def add(v) -> None:
        if v.label not in labels:
            labels.add(v.label)
            variants.append(v)

    if plan.original:
        add(Variant("original", result.original, settings, ()))
    if plan.current and passes:
        add(Variant(f"current ({len(passes)} passes)", result.final, settings, tuple(passes)))
    if plan.levels:
        for lv in LEVELS:
            if lv != plan.level:
                add(Variant(f"original @ORT {lv}", result.original,
                            dataclasses.replace(settings, level=lv), ()))
    if plan.references:
        try:
            from fusionviz.bench.whatif import reference_variants

            refs, failures = reference_variants(result.original, settings, shapes=shapes or None)
            for v in refs:
                add(v)
            notes.update({k: f"left out: {v}" for k, v in failures.items()})
        except ImportError as exc:
            notes["references"] = f"not available ({exc})"
    if plan.cumulative and passes:
        from fusionviz.bench.whatif import cumulative

        w = cumulative(result.original, passes, settings)
        for v in w.variants:
            add(v)
        if w.skipped:
            notes["cumulative"] = f"{len(w.skipped)} passes changed nothing and were not measured"
    if plan.leave_one_out and passes:
        from fusionviz.bench.whatif import leave_one_out

        w = leave_one_out(result.original, passes, settings)
        for v in w.variants:
            add(v)
    return variants, notes


def _worker(job: BenchJob, plan: Plan, proto, passes, result, shapes) -> None:
    from fusionviz.bench import BenchCancelled, run_benchmark

    def progress(fraction: float, msg: str) -> None:
        job.fraction = max(0.0, min(1.0, float(fraction)))
        job.message = msg

    try:
        job.message = "building variants"
        variants, notes = build_variants(plan, proto, passes, result, shapes)
        job.context["notes"] = notes
        if not variants:
            job.error = "Choose at least one variant (and select passes for the per-pass ones)."
            return
        job.context["labels"] = [v.label for v in variants]
        job.results = run_benchmark(variants, shapes=shapes or None, min_time_s=plan.min_time_s,
                                    profile=plan.profile, verify_against=result.original,
                                    progress=progress, cancel=job.cancel)
    except BenchCancelled:
        job.error = "Benchmark cancelled."
    except errors.FusionvizError as exc:
        job.error = str(exc)
    except Exception:  # noqa: BLE001 - the app must stay up
        logger.exception("benchmark failed")
        job.error = "The benchmark failed unexpectedly; the details are in the server log."


def _tune_worker(job: BenchJob, proto, shapes, budget_s: float, min_time_s: float) -> None:
    from fusionviz import tune

    def progress(msg: str) -> None:
        job.message = msg
        job.fraction = min(0.99, (time.monotonic() - job.started) / max(budget_s, 1.0))

    try:
        job.results = tune.tune(proto, shapes=shapes or None, budget_s=budget_s, min_time_s=min_time_s,
                                progress=progress)
    except errors.FusionvizError as exc:
        job.error = str(exc)
    except Exception:  # noqa: BLE001 - the app must stay up
        logger.exception("tune failed")
        job.error = "The search failed unexpectedly; the details are in the server log."


def _cancel() -> None:
    job = st.session_state.get(state.BENCH_JOB)
    if job is not None:
        job.cancel.set()
        job.message = "cancelling..."


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
    current = c[0].checkbox(f"Current selection ({n_passes} pass{'es' if n_passes != 1 else ''})", **state.keep("bench_v_current", True))
    original = c[0].checkbox("Original", **state.keep("bench_v_original", True))
    levels = c[1].checkbox("Original under every ORT level", **state.keep("bench_v_levels", False),
                           help="off, basic, extended, layout, all: what onnxruntime's own optimizer gains.")
    refs = c[1].checkbox("Reference optimizers", **state.keep("bench_v_refs", False),
                         help="onnxslim, onnxsim, onnxscript's optimizer, ORT's saved graph: whole pipelines.")
    cum = c[2].checkbox("Per pass: cumulative", **state.keep("bench_v_cumulative", False),
                        help="original, +p1, +p1+p2, ...: what each pass adds given the ones before it.")
    loo = c[2].checkbox("Per pass: leave one out", **state.keep("bench_v_loo", False),
                        help="all passes, and all but p for each p: what the result loses without p.")
    st.markdown("**Settings**")
    s = st.columns(5)
    level = s[0].selectbox("ORT optimization level", LEVELS, **state.keep("bench_level", "off"),
                           help="'off' (default) measures exactly what your passes do.")
    threads = s[1].number_input("Threads", min_value=1, max_value=64, step=1, **state.keep("bench_threads", 1))
    provs = _providers()
    provider = s[2].selectbox("Execution provider", provs, **state.keep("bench_provider", provs[0]))
    min_time = s[3].slider("Seconds per variant", 0.2, 10.0, step=0.2, **state.keep("bench_min_time", 1.0))
    denormal = s[4].checkbox("Denormals as zero", **state.keep("bench_denormal", False))
    profile = s[4].checkbox("Profile by op type", **state.keep("bench_profile", False))
    return Plan(current, original, levels, refs, cum, loo, level, int(threads), provider, denormal,
                float(min_time), profile)


def _start(plan: Plan, loaded, result) -> None:
    job = BenchJob(cancel=threading.Event())
    job.context = {"model": loaded.name, "sha256": loaded.sha256, "passes": state.passes(),
                   "plan": dataclasses.asdict(plan), "pipeline": result.as_dict()}
    t = threading.Thread(target=_worker, args=(job, plan, loaded.proto, state.passes(), result, state.shapes()),
                         name="fusionviz-bench", daemon=True)
    job.thread = t
    st.session_state[state.BENCH_JOB] = job
    t.start()


def _poll(job: BenchJob) -> None:
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


def results_table(results) -> pd.DataFrame:
    """One row per variant: latency statistics, memory, verification, error."""
    base = next((r.stats.median_ms for r in results if r.stats is not None), None)
    rows = []
    for r in results:
        st_ = r.stats
        v = r.verify or {}
        rows.append({
            "variant": r.label,
            "median ms": round(st_.median_ms, 3) if st_ else None,
            "vs first": f"{st_.median_ms / base:.2f}×" if st_ and base else None,
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


def markdown_report(results, context: dict) -> str:
    """A Markdown report of a benchmark run (model, passes, settings, one row per variant)."""
    try:
        from fusionviz import report

        return report.markdown(results, context)
    except (ImportError, AttributeError, TypeError):
        pass
    df = results_table(results)
    lines = [f"# fusionviz benchmark: {context.get('model', '')}", "",
             f"- sha256: `{context.get('sha256', '')}`",
             f"- passes: {', '.join(context.get('passes', [])) or '(none)'}", ""]
    cols = ["variant", "median ms", "vs first", "p10 ms", "p90 ms", "95% CI ms", "runs", "stable",
            "peak RSS MB", "static peak", "verify", "settings", "error"]
    lines.append("| " + " | ".join(cols) + " |")
    lines.append("|" + "---|" * len(cols))
    for _, row in df.iterrows():
        lines.append("| " + " | ".join("" if pd.isna(row[c]) else str(row[c]).replace("|", "/") for c in cols) + " |")
    return "\n".join(lines) + "\n"


def _charts(results, context) -> None:
    from fusionviz import charts

    ok = [r for r in results if r.stats is not None]
    if not ok:
        return
    tabs = st.tabs(["Latency", "Memory", "Per pass", "Where time goes", "Speed vs error", "Tensor lifetimes"])
    with tabs[0], common.guard("drawing the latency chart"):
        st.plotly_chart(charts.latency_box(ok), width="stretch", key="chart_latency")
    with tabs[1], common.guard("drawing the memory chart"):
        st.plotly_chart(charts.memory_bars(ok), width="stretch", key="chart_memory")
    with tabs[2], common.guard("drawing the per-pass chart"):
        from fusionviz.bench import whatif

        labels = [r.label for r in ok]
        if any(lbl.startswith("+") for lbl in labels):
            steps = whatif.cumulative_steps(ok)
            st.plotly_chart(charts.waterfall(steps), width="stretch", key="chart_waterfall")
        else:
            st.caption("Tick 'Per pass: cumulative' and run again to see what each pass adds.")
        if any(lbl.startswith("-") for lbl in labels):
            st.markdown("**Leave one out**: what the result loses without each pass")
            st.dataframe(pd.DataFrame(whatif.leave_one_out_table(ok)), hide_index=True, width="stretch")
    with tabs[3], common.guard("drawing the profile chart"):
        prof = [r for r in ok if r.profile]
        if len(prof) >= 2:
            a, b = prof[0], prof[-1]
            st.plotly_chart(charts.optype_time_bars(a.profile, b.profile, labels=(a.label, b.label)),
                            width="stretch", key="chart_optype")
        else:
            st.caption("Tick 'Profile by op type' and run at least two variants to see where time goes.")
    with tabs[4], common.guard("drawing the speed-vs-error chart"):
        pts = [{"label": r.label, "median_ms": r.stats.median_ms,
                "max_rel_diff": (r.verify or {}).get("max_rel_diff")} for r in ok]
        st.plotly_chart(charts.speed_vs_error(pts), width="stretch", key="chart_speed_error")
    with tabs[5], common.guard("drawing the tensor lifetimes"):
        loaded = state.model()
        result = common.current_pipeline(progress=False)
        key = (*common.pipeline_key(loaded, state.passes()), len(result.snapshots) - 1)
        plan = cache.memory_plan(key, state.shapes_key(), result.final)
        st.caption("Static memory plan of the current selection: each bar is one activation, from the "
                   "step that produces it to its last use.")
        st.plotly_chart(charts.lifetime_gantt(plan), width="stretch", key="chart_gantt")


def _downloads(results, context) -> None:
    loaded = state.model()
    payload = {"model": context.get("model"), "sha256": context.get("sha256"),
               "passes": context.get("passes"), "plan": context.get("plan"),
               "pipeline": context.get("pipeline"), "notes": context.get("notes"),
               "variants": [r.as_dict() for r in results]}
    c = st.columns(3)
    c[0].download_button("JSON report", json.dumps(payload, indent=2, default=str),
                         file_name="fusionviz-bench.json", mime="application/json", key="dl_json", icon=":material/download:",
                         width="stretch")
    c[1].download_button("Markdown report", markdown_report(results, context),
                         file_name="fusionviz-bench.md", mime="text/markdown", key="dl_md", icon=":material/download:",
                         width="stretch")
    _download_model(c[2], loaded)


def _download_model(col, loaded) -> None:
    result = common.current_pipeline(progress=False)
    stem = loaded.name.rsplit(".", 1)[0]
    col.download_button("Optimized model (.onnx)", result.final.SerializeToString(),
                        file_name=f"{stem}.fusionviz.onnx", mime="application/octet-stream",
                        key="dl_model", icon=":material/download:", width="stretch")


def _apply_tune(res) -> None:
    state.set_passes(list(res.best.passes))
    st.session_state.setdefault(state.WIDGETS, {})["bench_level"] = res.best.level
    st.session_state.setdefault(state.WIDGETS, {})["bench_denormal"] = bool(res.best.denormal_as_zero)
    st.session_state[state.MESSAGE] = (f"Auto what-if winner applied: {len(res.best.passes)} passes; "
                                       f"benchmark level set to '{res.best.level}'.")


def _tune(loaded, busy: bool) -> None:
    try:
        from fusionviz import tune  # noqa: F401
    except ImportError:
        return
    with st.expander("Auto what-if: search for the fastest variant that still verifies",
                     expanded=bool(st.session_state.get("fv_tune_open"))):
        st.caption("Starts from every exact pass, greedily drops any pass whose removal is faster, then "
                   "tries each onnxruntime level (and denormals-as-zero); only verified variants can win.")
        c = st.columns([2, 2, 1])
        budget = c[0].slider("Time budget (s)", 20, 600, step=10, **state.keep("tune_budget", 120))
        per = c[1].slider("Seconds per variant", 0.2, 3.0, step=0.1, **state.keep("tune_min_time", 0.5))
        if c[2].button("Run the search", key="tune_run", disabled=busy, type="primary"):
            job = BenchJob(cancel=threading.Event(), kind="tune")
            job.context = {"sha256": loaded.sha256}
            job.thread = threading.Thread(target=_tune_worker, args=(job, loaded.proto, state.shapes(),
                                                                      float(budget), float(per)),
                                          name="fusionviz-tune", daemon=True)
            st.session_state[state.BENCH_JOB] = job
            job.thread.start()
            st.rerun()
        saved = st.session_state.get("fv_tune")
        if not saved or saved.get("sha256") != loaded.sha256:
            return
        res = saved["result"]
        st.success(f"Winner: {res.best.label()} — {res.best_ms:.2f} ms vs the original under ORT all "
                   f"{res.baseline_ms:.2f} ms ({res.speedup:.2f}× faster), verified.")
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


def body() -> None:
    """The Benchmark page."""
    loaded = common.require_model()
    st.title("Benchmark")
    st.caption("Each variant runs in its own worker process; variants are interleaved in rounds so "
               "machine drift hits all alike; warm-up runs are discarded.")
    result = common.current_pipeline()
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
        st.error(err)
    bench = st.session_state.get(state.BENCH)
    if bench and bench["context"].get("sha256") == loaded.sha256:
        results, context = bench["results"], bench["context"]
        for k, note in (context.get("notes") or {}).items():
            st.caption(f"{k}: {note}")
        for r in results:
            if r.error:
                st.warning(f"{r.label}: {r.error}")
        _charts(results, context)
        st.dataframe(results_table(results), hide_index=True, width="stretch")
        _downloads(results, context)
    else:
        st.info("Choose variants and press Run. A 1-second run of two variants takes about 10 s.")
        _download_model(st.columns(3)[0], loaded)


def render() -> None:
    """Draw the page under the error guard."""
    common.page("Benchmark", body)


if __name__ == "__main__":
    render()
