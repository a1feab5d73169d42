"""A report of one optimization: model, inputs, passes, verification, benchmark, CLI command.

Pure data in, plain data out (no Streamlit): the app's download buttons and any script build
the same report.

Rules:

1. :func:`build` gathers everything into one JSON-ready dict; :func:`to_json` and
   :func:`markdown` render that dict, so the two formats never disagree.
2. The model is named by its file name or sample name only, never by a path on the machine
   that made the report.
3. :func:`cli_command` is the exact ``python -m fusionviz optimize`` line that reproduces the
   optimized model: the passes in canonical order, a ``--shape`` for every input whose dims
   the pipeline fixed, an ``--input`` for every value the user set, ``--inputs`` for the user's
   data file. Every argument is shell-quoted.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

SCHEMA = 1
DEFAULT_OUTPUT = "out.onnx"


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


def cli_command(model: str, passes: Sequence[str], *, shapes: Mapping[str, Sequence[int]] | None = None,
                values: Mapping[str, float | int | bool] | None = None, inputs_file: str | None = None,
                output: str = DEFAULT_OUTPUT) -> str | None:
    """The ``optimize`` command that reproduces a result (rule 3).

    Args:
        model: a sample name or the model's file name (a path is cut to its file name).
        passes: the selected passes, in the order they ran.
        shapes: concrete dims of the inputs the pipeline fixed.
        values: values the user set for inputs (``--input``).
        inputs_file: file name of the user's input data (``--inputs``).
        output: the output file name.

    Returns:
        One shell line, or None when no pass is selected (the CLI always runs at least one:
        there is nothing to reproduce).
    """
    if not passes:
        return None
    parts = ["python", "-m", "fusionviz", "optimize", os.path.basename(model) or model, "-o", output,
             "--passes", ",".join(passes)]
    for name, dims in sorted((shapes or {}).items()):
        parts += ["--shape", f"{name}={','.join(str(int(d)) for d in dims)}"]
    for name, value in sorted((values or {}).items()):
        parts += ["--input", f"{name}={_fmt_value(value)}"]
    if inputs_file:
        parts += ["--inputs", os.path.basename(inputs_file)]
    return " ".join(shlex.quote(p) for p in parts)


def _pass_row(rep: Any) -> dict:
    d = _as_dict(rep) or {}
    changes = d.get("changes") or []
    described = []
    for c in getattr(rep, "changes", ()) or ():
        describe = getattr(c, "describe", None)
        described.append(describe() if callable(describe) else str(c))
    if not described:
        described = [c.get("description") or c.get("kind", "") if isinstance(c, Mapping) else str(c)
                     for c in changes]
    status = d.get("status") or getattr(rep, "status", "") or ("applied" if changes else "unchanged")
    return {
        "name": d.get("name", ""),
        "title": d.get("title", ""),
        "status": status,
        "changes": len(changes),
        "change_list": described,
        "nodes_before": d.get("nodes_before"),
        "nodes_after": d.get("nodes_after"),
        "declined": d.get("declined"),
        "error": d.get("error"),
        "after": list(d.get("after") or []),
        "note": d.get("note") or "",
    }


def _verification(v: Any) -> dict | None:
    d = _as_dict(v)
    if d is None:
        return None
    rows = []
    for o in d.get("outputs") or []:
        rows.append({k: o.get(k) for k in ("input_set", "name", "shape", "max_abs_diff", "max_rel_diff",
                                            "cosine", "mismatches", "new_nonfinite", "size", "ok")})
        rows[-1]["shape"] = list(rows[-1]["shape"] or [])
    summary = getattr(v, "summary", None)
    verdict = "not run" if d.get("error") else ("equal" if d.get("ok") else (
        "differs (report only)" if d.get("report_only") else "DIFFERENT"))
    return {
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
        "outputs": rows,
    }


def _bench(results: Sequence[Any] | None, settings: Mapping[str, Any] | None) -> dict | None:
    if not results:
        return None
    rows = []
    for r in results:
        d = _as_dict(r) or {}
        lat = d.get("latency") or {}
        ver = d.get("verify") or {}
        rows.append({
            "variant": d.get("label"),
            "settings": (d.get("settings") or {}).get("level"),
            "median_ms": lat.get("median_ms"),
            "ci_low_ms": lat.get("ci_low_ms"),
            "ci_high_ms": lat.get("ci_high_ms"),
            "runs": lat.get("n"),
            "unstable": lat.get("unstable"),
            "rss_run_mb": (d.get("memory") or {}).get("rss_run_mb"),
            "verify": None if not ver else ("equal" if ver.get("ok") else "differs"),
            "error": d.get("error"),
        })
    return {"settings": dict(settings or {}), "variants": rows}


def build(*, model_name: str, sha256: str = "", source: str = "", passes: Sequence[Any] = (),
          nodes_before: int | None = None, nodes_after: int | None = None,
          inputs: Sequence[str] = (), input_sets: Sequence[str] = (), verification: Any = None,
          bench: Sequence[Any] | None = None, bench_settings: Mapping[str, Any] | None = None,
          command: str | None = None, notes: Sequence[str] = ()) -> dict:
    """The report as plain data (rule 1).

    Args:
        model_name: the model's file name or sample name (a path is cut to its file name).
        sha256: the model's content hash.
        source: where the model came from, in words (``sample``, ``upload``, ...).
        passes: :class:`fusionviz.passes.pipeline.PassReport` objects (or their dicts), in order.
        nodes_before: node count of the original.
        nodes_after: node count after the passes.
        inputs: one line per input (:meth:`fusionviz.inputs.InputPlan.describe_lines`).
        input_sets: the verification input sets offered (``normal``, ``zeros``, ``edge``, ``user``).
        verification: a :class:`fusionviz.verify.VerifyResult` (or its dict), or None.
        bench: :class:`fusionviz.bench.BenchResult` objects (or dicts), or None.
        bench_settings: what the benchmark run used (level, threads, ...).
        command: the reproducing CLI line (:func:`cli_command`).
        notes: extra one-line notes.

    Returns:
        A JSON-ready dict with keys ``fusionviz_report``, ``model``, ``inputs``, ``passes``,
        ``nodes``, ``verification``, ``bench``, ``command`` and ``notes``.
    """
    rows = [_pass_row(r) for r in passes]
    return {
        "fusionviz_report": SCHEMA,
        "model": {"name": os.path.basename(model_name) or model_name, "sha256": sha256, "source": source},
        "inputs": {"lines": list(inputs), "sets": list(input_sets)},
        "passes": rows,
        "nodes": {"before": nodes_before, "after": nodes_after},
        "verification": _verification(verification),
        "bench": _bench(bench, bench_settings),
        "command": command,
        "notes": list(notes),
    }


def to_json(report: Mapping[str, Any]) -> str:
    """The report as indented JSON text."""
    return json.dumps(report, indent=2, default=str)


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
    nodes = report.get("nodes") or {}
    if nodes.get("before") is not None:
        lines.append(f"- nodes: {nodes.get('before')} → {nodes.get('after')}")
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
            body.append((i, f"`{r.get('name')}`", r.get("status"), r.get("changes"),
                         f"{r.get('nodes_before')} → {r.get('nodes_after')}", why))
        lines += _table(("#", "pass", "status", "changes", "nodes", "reason / note"), body) + [""]
        for r in rows:
            if r.get("change_list"):
                lines.append(f"<details><summary>{r.get('name')}: {len(r['change_list'])} changes</summary>")
                lines.append("")
                lines += [f"- {_cell(c)}" for c in r["change_list"]]
                lines += ["", "</details>", ""]
    else:
        lines += ["No pass selected.", ""]
    v = report.get("verification")
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
                            [(o["input_set"], o["name"], o["shape"], o["max_abs_diff"], o["max_rel_diff"],
                              o["cosine"], o["mismatches"], "yes" if o["ok"] else "NO") for o in v["outputs"]])
            lines.append("")
    else:
        lines += ["Not verified.", ""]
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
    for note in report.get("notes") or []:
        lines.append(f"> {note}")
    return "\n".join(lines).rstrip() + "\n"
