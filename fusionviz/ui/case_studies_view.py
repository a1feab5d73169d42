"""The Learn page's "Case studies" section: the seed article's claims beside what this machine gives.

Shows the last results saved by ``benchmarks/case_studies.py`` (``fusionviz.casestudies.load``:
the newest run, else the copy committed with the code) and can start a fresh run in a background
thread (the benchmark lock keeps it from timing beside another benchmark). Per case: the
article's claim, a table of latency (paired ratio to the original under onnxruntime off, with its
interval) beside memory (peak RSS while running, onnxruntime's arena peak, the static activation
peak with and without buffer reuse), the backends that were not timed and why, and why the
figures differ.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time

import streamlit as st

from fusionviz import casestudies

logger = logging.getLogger(__name__)

JOB = "fv_case_job"


@dataclasses.dataclass
class _Job:
    thread: threading.Thread | None = None
    message: str = "starting"
    error: str | None = None
    done: bool = False
    started: float = dataclasses.field(default_factory=time.monotonic)


def _work(job: _Job, keys: list[str], tvm: bool) -> None:
    def say(msg: str) -> None:
        job.message = msg

    try:
        records = [casestudies.run_case(casestudies.case(k), tvm=tvm, progress=say) for k in keys]
        casestudies.save(records)
    except Exception as exc:  # noqa: BLE001 - the app must stay up; the error is shown
        logger.exception("case study run failed")
        job.error = f"The run failed: {exc}"
    job.done = True


def _start(keys: list[str], tvm: bool) -> None:
    job = _Job()
    job.thread = threading.Thread(target=_work, args=(job, keys, tvm), name="fusionviz-cases", daemon=True)
    st.session_state[JOB] = job
    job.thread.start()


def _table(rows: list[dict]):
    import pandas as pd

    out = []
    for r in rows:
        ci = r.get("ci") or [None, None]
        out.append({
            "variant": r["label"],
            "ms": round(r["median_ms"], 3) if r.get("median_ms") is not None else None,
            "vs ORT off": round(r["ratio"], 3) if r.get("ratio") is not None else None,
            "95% interval": f"{ci[0]:.3f}–{ci[1]:.3f}" if ci[0] is not None else "",
            "in words": casestudies.row_claim(r) if r.get("label") != casestudies.BASELINE else "(the baseline)",
            "peak RSS MB": round(r["rss_run_mb"], 1) if r.get("rss_run_mb") is not None else None,
            "ORT arena MB": round(r["arena_peak_mb"], 2) if r.get("arena_peak_mb") is not None else None,
            "activations MB (reuse / none)": (f"{r['static_peak_mb']:.2f} / {r['static_peak_no_reuse_mb']:.2f}"
                                              if r.get("static_peak_mb") is not None else ""),
            "verified": r.get("verified"),
            "error": r.get("error") or "",
        })
    return pd.DataFrame(out)


def _case(rec: dict) -> None:
    with st.container(border=True):
        st.markdown(f"**{rec['title']}** · sample `{rec['sample']}` · {rec['technique']}")
        st.markdown(f"Article: *{rec['claim']}*.")
        rows = [r for r in rec.get("rows", []) if r.get("ratio") is not None and r.get("verified")]
        if rows:
            st.markdown(f"On this machine, {casestudies.fastest_sentence(rows)} (the article: {rec['claim']}).")
        st.dataframe(_table(rec.get("rows", [])), hide_index=True, width="stretch")
        for note in (rec.get("notes") or {}).values():
            st.caption(note)
        st.markdown(rec.get("why", ""))
        st.caption(f"Measured {rec.get('when', '?')}, 1 thread, interleaved; load average "
                   f"{(rec.get('load') or ['?'])[0]} (2 shared cores).")


def section() -> None:
    """The case-studies section of the Learn page."""
    st.subheader("The article's case studies, measured here")
    st.markdown("The seed article reports ResNet ~30% faster with kernel fusion and graph optimization "
                "(TensorRT), BERT ~20% faster and ~25% less memory with graph optimization (TVM), and "
                "EfficientNet ~15% faster with fusion and in-place operations. Below: the same techniques on "
                "our samples, on this CPU, per runtime, memory beside latency, from "
                "`python benchmarks/case_studies.py`.")
    job = st.session_state.get(JOB)
    c = st.columns([1.2, 1, 3], vertical_alignment="center")
    running = job is not None and not job.done
    tvm = c[1].toggle("Time TVM too", key="cases_tvm", help="Untuned TVM is tens of times slower; minutes.")
    if c[0].button("Run them again", icon=":material/play_arrow:", key="cases_run", disabled=running):
        _start([k.key for k in casestudies.CASES], bool(tvm))
        st.rerun()
    if running:
        c[2].info(f"Running ({time.monotonic() - job.started:.0f} s): {job.message}")
        time.sleep(1.0)
        st.rerun()
    elif job is not None and job.error:
        c[2].error(job.error)
    records = casestudies.load()
    if not records:
        st.info("No saved results yet: run them (a few minutes) or `python benchmarks/case_studies.py`.")
        return
    for rec in records:
        _case(rec)
