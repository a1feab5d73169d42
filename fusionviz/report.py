"""The report of one optimization: one schema for the CLI (``optimize --report``) and the app.

Pure data in, plain data out (no Streamlit): ``optimize --report R.json|R.html|R.md`` and the
app's Export row (Passes and Benchmark pages) call the same :func:`build`, so the two reports
have the same keys.

Rules:

1. :func:`build` gathers everything into one JSON-ready dict (schema below); :func:`to_json`,
   :func:`markdown` and :func:`fusionviz.report_html.render` render that dict, so the formats
   never disagree. The HTML embeds the JSON text it was made from.
2. The model is named by its file name or sample name only, never by a path on the machine
   that made the report.
3. :func:`cli_command` is the exact ``python -m fusionviz optimize`` line that reproduces the
   optimized model: the passes in canonical order, a ``--shape`` for every input whose dims
   the pipeline fixed, an ``--input`` for every value the user set, ``--inputs`` for the user's
   data file, ``--freeze`` for every input made a constant, the tolerances when not the
   defaults. Every argument is shell-quoted.
4. Every key is always there: a part that was not run (verification, bisection, per-tensor
   comparison, benchmark) is ``null``, so a reader never guesses between "absent" and "renamed".
5. JSON has no NaN or infinity: :func:`to_json` writes them as the strings ``"nan"``, ``"inf"``,
   ``"-inf"``.

Schema (``fusionviz_report: 2``)::

    model        {name, sha256, source}
    command      the reproducing CLI line (rule 3), or null when no pass is selected
    inputs       {lines, sets, plan: [{name, dtype, declared, dims, value}]}
    passes       [{name, title, status, changes: [{kind, inputs, outputs, ..., description}],
                   nodes_before, nodes_after, seconds, declined, error, after, note,
                   near_misses: [{rule, nodes, blocker, reason, hint, kind}], near_miss_total}]
    nodes_before, nodes_after, seconds (the pipeline's)
    verify       VerifyResult.as_dict() + verdict + summary, or null
    bisect       BisectResult.as_dict(), or null
    compare      CompareResult.as_dict() (per-tensor rows), or null
    bench        {settings, variants: [{variant, passes, backend, settings, threads, median_ms,
                   ci_low_ms, ci_high_ms, p10_ms, p90_ms, runs, unstable, rss_run_mb, verify,
                   error}]}, or null
    notes        one sentence each
    environment  fusionviz.environment.collect()
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from fusionviz.report_json import to_json

SCHEMA = 2
DEFAULT_OUTPUT = "out.onnx"
DEFAULT_RTOL = 1e-4
DEFAULT_ATOL = 1e-5
#: Report formats by file extension (``optimize --report``).
FORMATS = {".json": "json", ".html": "html", ".htm": "html", ".md": "markdown"}
#: The top-level keys of every report (rule 4), in order.
KEYS = ("fusionviz_report", "model", "command", "inputs", "passes", "nodes_before", "nodes_after", "seconds",
        "verify", "bisect", "compare", "bench", "notes", "environment")


def format_of(path: str) -> str | None:
    """The report format a file name asks for (``json``, ``html``, ``markdown``), or None."""
    return FORMATS.get(os.path.splitext(path)[1].lower())


def _as_dict(obj: Any) -> dict | None:
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return dict(obj)
    fn = getattr(obj, "as_dict", None)
    if callable(fn):
        return fn()
    raise TypeError(f"cannot turn {type(obj).__name__} into report data")


def _fmt_value(v: float | int | bool) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, float) else str(v)


def _fmt_scalar(v: Any) -> str:
    """A frozen input's value as ``--freeze`` takes it (a one-element array is its element)."""
    item = getattr(v, "item", None)
    if callable(item) and getattr(v, "size", 1) == 1:
        v = item()
    return _fmt_value(v) if isinstance(v, (bool, int, float)) else str(v)


def cli_command(model: str, passes: Sequence[str], *, shapes: Mapping[str, Sequence[int]] | None = None,
                values: Mapping[str, float | int | bool] | None = None, inputs_file: str | None = None,
                output: str = DEFAULT_OUTPUT, freeze: Mapping[str, Any] | None = None,
                rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
                keep_fp32: Sequence[str] = ()) -> str | None:
    """The ``optimize`` command that reproduces a result (rule 3).

    Args:
        model: a sample name or the model's file name (a path is cut to its file name).
        passes: the selected passes, in the order they ran.
        shapes: concrete dims of the inputs the pipeline fixed.
        values: values the user set for inputs (``--input``).
        inputs_file: file name of the user's input data (``--inputs``).
        output: the output file name.
        freeze: inputs made constants (``--freeze``): their values.
        rtol, atol: the verification's tolerances (written when not the defaults).
        keep_fp32: nodes the precision passes kept in float32 on request (``--keep-fp32``).

    Returns:
        One shell line, or None when no pass is selected (the CLI always runs at least one:
        there is nothing to reproduce).
    """
    if not passes:
        return None
    parts = ["python", "-m", "fusionviz", "optimize", os.path.basename(model) or model, "-o",
             os.path.basename(output) or output, "--passes", ",".join(passes)]
    for name, dims in sorted((shapes or {}).items()):
        parts += ["--shape", f"{name}={','.join(str(int(d)) for d in dims)}"]
    for name, value in sorted((values or {}).items()):
        parts += ["--input", f"{name}={_fmt_value(value)}"]
    if inputs_file:
        parts += ["--inputs", os.path.basename(inputs_file)]
    if keep_fp32:
        parts += ["--keep-fp32", ",".join(keep_fp32)]
    for name, value in sorted((freeze or {}).items()):
        parts += ["--freeze", f"{name}={_fmt_scalar(value)}"]
    if rtol != DEFAULT_RTOL:
        parts += ["--rtol", f"{rtol:g}"]
    if atol != DEFAULT_ATOL:
        parts += ["--atol", f"{atol:g}"]
    return " ".join(shlex.quote(p) for p in parts)


def _change(c: Any) -> dict:
    if isinstance(c, Mapping):
        d = dict(c)
        d.setdefault("description", d.get("kind", ""))
        return d
    d = _as_dict(c) or {}
    describe = getattr(c, "describe", None)
    d["description"] = describe() if callable(describe) else str(c)
    return d


def _pass_row(rep: Any) -> dict:
    d = _as_dict(rep) or {}
    changes = [_change(c) for c in (getattr(rep, "changes", None) or d.get("changes") or [])]
    near = [_as_dict(m) for m in (getattr(rep, "near_misses", None) or d.get("near_misses") or [])]
    status = d.get("status") or getattr(rep, "status", "") or ("applied" if changes else "unchanged")
    return {
        "name": d.get("name", ""),
        "title": d.get("title", ""),
        "status": status,
        "changes": changes,
        "nodes_before": d.get("nodes_before"),
        "nodes_after": d.get("nodes_after"),
        "seconds": d.get("seconds"),
        "declined": d.get("declined"),
        "error": d.get("error"),
        "after": list(d.get("after") or []),
        "note": d.get("note") or "",
        "near_misses": near,
        "near_miss_total": d.get("near_miss_total", len(near)),
    }


def _verification(v: Any) -> dict | None:
    d = _as_dict(v)
    if d is None:
        return None
    summary = getattr(v, "summary", None)
    verdict = "not run" if d.get("error") else ("equal" if d.get("ok") else (
        "differs (report only)" if d.get("report_only") else "DIFFERENT"))
    out = {
        "verdict": verdict,
        "summary": summary() if callable(summary) else d.get("summary", ""),
        "ok": d.get("ok"),
        "report_only": d.get("report_only"),
        "error": d.get("error"),
        "failure": d.get("failure"),
        "input_sets": list(d.get("input_sets") or []),
        "skipped_sets": [list(s) for s in d.get("skipped_sets") or []],
        "rtol": d.get("rtol"),
        "atol": d.get("atol"),
    }
    for k, val in d.items():
        out.setdefault(k, val)
    rows = []
    for o in d.get("outputs") or []:
        row = dict(o)
        row["shape"] = list(row.get("shape") or [])
        rows.append(row)
    out["outputs"] = rows
    return out


def _plan(plan: Any) -> list[dict]:
    if plan is None:
        return []
    out = []
    for c in getattr(plan, "choices", ()):
        declared = None if c.declared is None else [d if isinstance(d, int) or d is None else str(d)
                                                    for d in c.declared]
        out.append({"name": c.name, "dtype": c.dtype, "declared": declared, "dims": list(c.dims),
                    "value": c.value})
    return out


def _bench(results: Sequence[Any] | None, settings: Mapping[str, Any] | None) -> dict | None:
    if not results:
        return None
    rows = []
    for r in results:
        d = _as_dict(r) or {}
        lat = d.get("latency") or {}
        ver = d.get("verify") or {}
        s = d.get("settings") or {}
        rows.append({
            "variant": d.get("label"),
            "passes": list(d.get("passes") or []),
            "backend": d.get("backend") or s.get("backend"),
            "settings": s.get("level"),
            "threads": s.get("threads"),
            "median_ms": lat.get("median_ms"),
            "ci_low_ms": lat.get("ci_low_ms"),
            "ci_high_ms": lat.get("ci_high_ms"),
            "p10_ms": lat.get("p10_ms"),
            "p90_ms": lat.get("p90_ms"),
            "runs": lat.get("n"),
            "unstable": lat.get("unstable"),
            "rss_run_mb": (d.get("memory") or {}).get("rss_run_mb"),
            "verify": None if not ver else ("equal" if ver.get("ok") else "differs"),
            "error": d.get("error"),
        })
    return {"settings": dict(settings or {}), "variants": rows}


def build(*, model_name: str, sha256: str = "", source: str = "", result: Any = None, passes: Sequence[Any] = (),
          nodes_before: int | None = None, nodes_after: int | None = None, seconds: float | None = None,
          plan: Any = None, inputs: Sequence[str] = (), input_sets: Sequence[str] = (), verification: Any = None,
          bisect: Any = None, compare: Any = None, bench: Sequence[Any] | None = None,
          bench_settings: Mapping[str, Any] | None = None, command: str | None = None, notes: Sequence[str] = (),
          environment: Mapping[str, Any] | None = None) -> dict:
    """The report as plain data (rule 1), for the CLI and the app alike.

    Args:
        model_name: the model's file name or sample name (a path is cut to its file name).
        sha256: the model's content hash.
        source: where the model came from, in words (``file``, ``sample``, ``upload``, ...).
        result: a :class:`fusionviz.passes.pipeline.PipelineResult`: its pass reports, node
            counts, seconds and notes (the explicit arguments below, when given, win).
        passes: :class:`fusionviz.passes.pipeline.PassReport` objects (or their dicts), in order.
        nodes_before: node count of the original.
        nodes_after: node count after the passes.
        seconds: the pipeline's wall time.
        plan: the :class:`fusionviz.inputs.InputPlan` (its lines and concrete dims).
        inputs: one line per input (default: the plan's ``describe_lines``).
        input_sets: the verification input sets (default: the verification's).
        verification: a :class:`fusionviz.verify.VerifyResult` (or its dict), or None.
        bisect: a :class:`fusionviz.bisect.BisectResult` (or its dict), or None.
        compare: a :class:`fusionviz.compare.CompareResult` (or its dict: per-tensor rows), or None.
        bench: :class:`fusionviz.bench.BenchResult` objects (or dicts), or None.
        bench_settings: what the benchmark run used (level, threads, ...).
        command: the reproducing CLI line (:func:`cli_command`).
        notes: one-line notes (the pipeline result's come first).
        environment: the machine and versions (default: :func:`fusionviz.environment.collect`).

    Returns:
        A JSON-ready dict with the keys :data:`KEYS` (schema in the module docstring).
    """
    if result is not None:
        passes = passes or result.reports
        nodes_before = result.nodes_before if nodes_before is None else nodes_before
        nodes_after = result.nodes_after if nodes_after is None else nodes_after
        seconds = result.seconds if seconds is None else seconds
        notes = [*getattr(result, "notes", ()), *(n for n in notes if n not in getattr(result, "notes", ()))]
    ver = _verification(verification)
    if not inputs and plan is not None:
        inputs = plan.describe_lines()
    if not input_sets and ver is not None:
        input_sets = ver.get("input_sets") or ()
    if environment is None:
        from fusionviz import environment as env

        environment = env.collect()
    return {
        "fusionviz_report": SCHEMA,
        "model": {"name": os.path.basename(model_name) or model_name, "sha256": sha256, "source": source},
        "command": command,
        "inputs": {"lines": list(inputs), "sets": list(input_sets), "plan": _plan(plan)},
        "passes": [_pass_row(r) for r in passes],
        "nodes_before": nodes_before,
        "nodes_after": nodes_after,
        "seconds": None if seconds is None else round(float(seconds), 4),
        "verify": ver,
        "bisect": _as_dict(bisect),
        "compare": _as_dict(compare),
        "bench": _bench(bench, bench_settings),
        "notes": list(notes),
        "environment": dict(environment),
    }


def write(report: Mapping[str, Any], path: str, *, before: Any = None, after: Any = None) -> str:
    """Write ``report`` to ``path`` in the format its extension names (:data:`FORMATS`).

    Args:
        report: a dict from :func:`build`.
        path: where to write.
        before, after: the two models (ModelProto) the HTML draws; None leaves the graphs out.

    Returns:
        The format written.

    Raises:
        InputSpecError: an extension that names no format, or a file that cannot be written.
    """
    from fusionviz import errors

    fmt = format_of(path)
    if fmt is None:
        raise errors.InputSpecError(f"--report must end in .json, .html or .md, not '{os.path.basename(path)}'.")
    if fmt == "html":
        from fusionviz import report_html

        text = report_html.render(report, before=before, after=after)
    else:
        text = to_json(report) if fmt == "json" else markdown(report)
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise errors.InputSpecError(f"Cannot write '{path}': {exc.strerror}.") from None
    return fmt


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1e-3 or abs(v) >= 1e4 else f"{v:.4g}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def markdown(report: Mapping[str, Any]) -> str:
    """The report as Markdown (rule 1): the same content as the JSON, for reading."""
    m = report.get("model") or {}
    lines = [f"# fusionviz report: {m.get('name', '')}", ""]
    if m.get("sha256"):
        lines.append(f"- sha256: `{m['sha256']}`")
    if m.get("source"):
        lines.append(f"- source: {m['source']}")
    if report.get("nodes_before") is not None:
        lines.append(f"- nodes: {report.get('nodes_before')} → {report.get('nodes_after')}")
    lines.append("")
    lines += ["## Reproduce", ""]
    if report.get("command"):
        lines += ["```bash", report["command"], "```", ""]
    elif report.get("passes"):
        lines += ["No command recorded.", ""]
    else:
        lines += ["No pass selected: the optimized model is the original.", ""]
    inputs = report.get("inputs") or {}
    if inputs.get("lines"):
        lines += ["## Inputs", ""] + [f"- `{ln}`" for ln in inputs["lines"]] + [""]
    rows = report.get("passes") or []
    lines += ["## Passes", ""]
    if rows:
        body = []
        for i, r in enumerate(rows, start=1):
            why = r.get("declined") or r.get("error") or r.get("note") or ""
            body.append((i, f"`{r.get('name')}`", r.get("status"), len(r.get("changes") or []),
                         f"{r.get('nodes_before')} → {r.get('nodes_after')}", r.get("near_miss_total") or 0, why))
        lines += _table(("#", "pass", "status", "changes", "nodes", "near misses", "reason / note"), body) + [""]
        for r in rows:
            if r.get("changes"):
                lines.append(f"<details><summary>{r.get('name')}: {len(r['changes'])} changes</summary>")
                lines.append("")
                lines += [f"- {_cell(c.get('description'))}" for c in r["changes"]]
                lines += ["", "</details>", ""]
            if r.get("near_misses"):
                lines.append(f"<details><summary>{r.get('name')}: {r.get('near_miss_total')} near misses</summary>")
                lines.append("")
                for n in r["near_misses"]:
                    where = f"at `{n.get('blocker')}`: " if n.get("blocker") else ""
                    hint = f" — {n['hint']}" if n.get("hint") else ""
                    lines.append(f"- {where}{_cell(n.get('reason'))} ({n.get('kind')}){_cell(hint)}")
                lines += ["", "</details>", ""]
    else:
        lines += ["No pass selected.", ""]
    v = report.get("verify")
    lines += ["## Verification", ""]
    if v:
        lines.append(f"**{v.get('verdict')}**: {v.get('summary', '')}")
        lines.append("")
        if v.get("input_sets"):
            lines.append("Input sets: " + ", ".join(v["input_sets"]))
        for name, why in v.get("skipped_sets") or []:
            lines.append(f"- set '{name}' skipped: {why}")
        if v.get("failure"):
            lines.append(f"First failure: {v['failure']}")
        lines.append("")
        if v.get("outputs"):
            lines += _table(("input set", "output", "shape", "max abs", "max rel", "cosine", "mismatches", "ok"),
                            [(o.get("input_set"), o.get("name"), o.get("shape"), o.get("max_abs_diff"),
                              o.get("max_rel_diff"), o.get("cosine"), o.get("mismatches"),
                              "yes" if o.get("ok") else "NO") for o in v["outputs"]])
            lines.append("")
    else:
        lines += ["Not verified.", ""]
    bis = report.get("bisect")
    if bis:
        lines += ["## Bisection", "", str(bis.get("summary") or ""), ""]
    cmp_ = report.get("compare")
    if cmp_:
        lines += ["## Per-tensor comparison", "", str(cmp_.get("summary") or ""), ""]
    b = report.get("bench")
    if b:
        lines += ["## Benchmark", ""]
        s = b.get("settings") or {}
        if s:
            lines.append(", ".join(f"{k}: {v}" for k, v in s.items()))
            lines.append("")
        lines += _table(("variant", "level", "median ms", "95% CI ms", "runs", "verify", "error"),
                        [(r["variant"], r["settings"], r["median_ms"],
                          f"{_cell(r['ci_low_ms'])}–{_cell(r['ci_high_ms'])}" if r["median_ms"] is not None else "",
                          r["runs"], r["verify"], r["error"]) for r in b.get("variants") or []])
        lines.append("")
    env = report.get("environment") or {}
    if env:
        pk = env.get("packages") or {}
        lines += ["## Environment", "",
                  f"- CPU: {env.get('cpu') or 'unknown'} ({env.get('usable_cpus') or env.get('cpu_count')} usable)",
                  f"- Python {env.get('python')} on {env.get('platform')}",
                  "- " + ", ".join(f"{k} {v}" for k, v in pk.items()), ""]
    for note in report.get("notes") or []:
        lines.append(f"> {note}")
    return "\n".join(lines).rstrip() + "\n"
