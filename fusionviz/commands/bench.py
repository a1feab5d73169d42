"""`bench MODEL [--variant LABEL=PASSLIST ...] [--backend ort,openvino,tvm,trt] [--reference] ...`.

Measures variants of MODEL in isolated, interleaved workers (fusionviz.bench).
PASSLIST is comma-separated pass names, ``all`` (every exact pass) or empty (the original).
Without ``--variant`` the set is ``original`` and ``all passes``. With ``--backend`` naming more
than one backend, each of those variants is measured on every backend in the same interleaved
run, labelled ``LABEL @OpenVINO`` (:mod:`fusionviz.experiment.labels`: the first backend's variants keep
their label); ``--reference`` and ``--whatif`` variants stay on onnxruntime. Variants are made by
:class:`fusionviz.experiment.build.Builder` in roles (the what-if lines read roles, not labels).
A backend that cannot run here, or cannot compile the model, fails its own variants with one
line each; the others are measured. A variant asked for twice (the same model and settings
under two labels) is measured once (:mod:`fusionviz.bench.identity`). Progress goes to stderr,
the table to stdout: each variant against the first and against the original at the same
settings, as a paired ratio with its 95% interval and in :mod:`fusionviz.bench.claims`' words
("faster" / "slower" only when the interval excludes 1); with ``--whatif``, one line per
what-if effect (the Benchmark page's per-pass chart, from the same functions); then one line per
backend with the settings it applied, flush-to-zero included. ``--json`` writes one record per
variant (with its ``backend``).
"""

from __future__ import annotations

import dataclasses
import logging

from fusionviz import errors
from fusionviz.commands import _common as common
from fusionviz.ortlevels import LEVELS

logger = logging.getLogger(__name__)


def register(sub) -> None:
    p = sub.add_parser("bench", help="measure latency and memory of variants in onnxruntime")
    common.add_model_arg(p)
    p.add_argument("--variant", action="append", default=[], metavar="LABEL=PASSLIST",
                   help="a variant: label and comma-separated passes ('all' = every exact pass, "
                        "empty = original); repeatable")
    p.add_argument("--reference", action="store_true",
                   help="add the original under every ORT level and onnxslim/onnxsim/onnxscript/ORT-optimized graphs")
    p.add_argument("--whatif", choices=("cumulative", "leave-one-out"),
                   help="per-pass what-if variants over all passes (or the passes of --variant's last entry)")
    p.add_argument("--backend", default="ort", metavar="ort,openvino,tvm,trt",
                   help="backends to measure each variant on (default ort; see fusionviz.backends)")
    p.add_argument("--ort-level", default="off", choices=LEVELS, help="onnxruntime optimization level (default off)")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads (default 1)")
    p.add_argument("--provider", default="CPUExecutionProvider", help="execution provider")
    p.add_argument("--disable-optimizer", action="append", default=[], metavar="NAME",
                   help="onnxruntime optimizer to switch off (repeatable)")
    p.add_argument("--denormal-as-zero", action="store_true",
                   help="flush denormals to zero (onnxruntime session.set_denormal_as_zero, "
                        "OpenVINO CPU_DENORMALS_OPTIMIZATION)")
    common.add_input_args(p)
    common.add_freeze_arg(p)
    p.add_argument("--min-time", type=float, default=1.0, metavar="S", help="timed seconds per variant (default 1)")
    p.add_argument("--max-rounds", type=int, default=500, help="most interleaved rounds (default 500)")
    p.add_argument("--timeout", type=float, default=120, metavar="S", help="time limit per worker (default 120)")
    p.add_argument("--mem-limit", type=int, default=4096, metavar="MB", help="memory cap per worker (default 4096)")
    p.add_argument("--profile", action="store_true", help="aggregate onnxruntime's profiler by op type and node")
    p.add_argument("--no-verify", action="store_true", help="skip comparing outputs with the original")
    p.add_argument("--json", metavar="OUT.json", help="write the results as JSON ('-' for stdout)")
    p.set_defaults(func=run)


def _parse_variant(text: str) -> tuple[str, list[str]]:
    if "=" not in text:
        raise errors.InputSpecError(f"--variant '{text}' is not LABEL=PASSLIST (e.g. fused=fold_batchnorm,fuse_conv_activation).")
    label, _, plist = text.partition("=")
    label = label.strip()
    if not label:
        raise errors.InputSpecError(f"--variant '{text}' has an empty label.")
    from fusionviz.passes import registry

    names = [n.strip() for n in plist.split(",") if n.strip()]
    if names == ["all"]:
        names = registry.default_passes()
    registry.resolve(names)  # unknown names -> InputSpecError
    return label, names


def build_variants(model, args, settings, shapes, freeze=None) -> list:
    """Variants for the CLI flags, made by :class:`fusionviz.experiment.build.Builder`.

    The ``--variant`` set (or original and all passes) is repeated for every backend of
    ``args.backend``; what-if and reference variants use ``settings`` (onnxruntime). ``freeze``
    (``--freeze``) makes inputs constants in the variants with passes.
    """
    from fusionviz.backends.registry import parse_backends
    from fusionviz.experiment import labels
    from fusionviz.experiment.build import Builder, on_backends
    from fusionviz.passes import registry

    backends = parse_backends(getattr(args, "backend", None) or settings.backend)
    run = dataclasses.replace(settings, backend=backends[0])
    b = Builder(model, run, shapes=shapes, freeze=freeze, say=common.progress)
    specs = [_parse_variant(v) for v in args.variant]
    if args.whatif:
        passes = specs[-1][1] if specs else registry.default_passes()
        w = (b.cumulative if args.whatif == "cumulative" else b.leave_one_out)(passes, run)
        if w.skipped:
            common.progress(f"what-if: passes that changed nothing (not measured): {', '.join(w.skipped)}")
        variants = b.variants()
    else:
        for label, names in specs or [(None, []), (labels.ALL_PASSES, registry.default_passes())]:
            if label is None:
                b.original()
                continue
            if names:
                common.progress(f"running passes for '{label}': {', '.join(names)}")
            b.selection(label, names)
        variants = on_backends(b.variants(), backends, run)
    if args.reference:  # onnxruntime levels and reference optimizers: always on onnxruntime
        ort = dataclasses.replace(settings, backend="ort")
        refs = Builder(model, run, shapes=shapes, say=common.progress)
        refs.levels(LEVELS, ort)
        common.progress("running reference optimizers (onnxslim, onnxsim, onnxscript, ORT levels)")
        for tool, why in refs.references(settings=ort).items():
            common.progress(f"  reference {tool} not measured: {why}")
        have = {v.label for v in variants}
        variants += [v for v in refs.variants() if v.label not in have]
    labels_ = [v.label for v in variants]
    dupes = sorted({x for x in labels_ if labels_.count(x) > 1})
    if dupes:
        raise errors.InputSpecError(f"Variant labels must be unique; repeated: {', '.join(dupes)}.")
    return variants


def _vs(r, base) -> tuple[str, str]:
    """(ratio [95% interval], words) of ``r`` against ``base``."""
    from fusionviz.bench import whatif

    if base is None:
        return "-", "-"
    if base.label == r.label:
        return "1.000", "(itself)"
    e = whatif.effect(r, base)
    return e.interval() or "-", e.claim(with_figures=False)


def _fmt_table(results, originals=None) -> str:
    """The results table; ``originals`` are the labels whose model is the original (for the
    column against the original at the same settings)."""
    from fusionviz.bench import identity

    base = next((r for r in results if r.stats is not None), None)
    rows = [("variant", "median ms", "p10-p90 ms", "95% CI ms", "n", "vs first: ratio [95% CI]", "vs first",
             "vs original, same settings", "RSS run MB", "static peak MB", "verify")]
    for r in results:
        if r.stats is None:
            rows.append((r.label, "-", "-", "-", "-", "-", "-", "-", "-", "-", f"ERROR: {r.error}"))
            continue
        s = r.stats
        ratio, words = _vs(r, base)
        same = "-"
        if originals is not None:
            if r.label in originals:
                same = "(the original)"
            else:
                orig = identity.original_at(results, originals, r.settings)
                same = "not measured" if orig is None else "{1}; {0}".format(*_vs(r, orig))
        mem = r.memory
        rss = f"{mem['rss_run_mb']:.1f}" if mem.get("rss_run_mb") is not None else "-"
        sp = mem.get("static_peak_reuse_bytes")
        sp_s = f"{sp / 1024 / 1024:.2f}" if sp is not None else "-"
        ver = "-"
        if r.verify:
            ver = "ok" if r.verify.get("ok") else (r.verify.get("error") or f"max rel {r.verify.get('max_rel_diff', 0):.1e}")
        rows.append((r.label + (" (unstable)" if s.unstable else ""), f"{s.median_ms:.3f}",
                     f"{s.p10_ms:.3f}-{s.p90_ms:.3f}", f"{s.ci_low_ms:.3f}-{s.ci_high_ms:.3f}", str(s.n),
                     ratio, words, same, rss, sp_s, ver))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in rows)


def _whatif_lines(results) -> list[str]:
    """The per-pass effects with their words: the same effects the Benchmark page charts."""
    from fusionviz.bench import whatif

    lines: list[str] = []
    for kind, read in (("cumulative", whatif.cumulative_effects), ("leave-one-out", whatif.leave_one_out_effects)):
        effects, settings = read([r for r in results if r.stats is not None])
        if not effects:
            continue
        lines.append(whatif.run_title(kind, settings) + ":")
        lines += [f"  {e.label} vs {e.baseline}: {e.describe()}" for e in effects]
    return lines


def _backend_lines(results) -> list[str]:
    """One line per backend: its version and the settings it applied (flush-to-zero included)."""
    lines: list[str] = []
    seen: set[str] = set()
    for r in results:
        info = r.backend_info
        if not info or r.backend in seen:
            continue
        seen.add(r.backend)
        title = f"{info.get('title', r.backend)} {info.get('version') or ''}".strip()
        rest = ", ".join(f"{k}={v}" for k, v in info.items() if k not in ("backend", "title", "version"))
        lines.append(f"{r.backend}: {title}: {rest}")
    return lines


def run(args) -> int:
    from fusionviz.backends.registry import parse_backends
    from fusionviz.bench import Settings
    from fusionviz.experiment import run as experiment_run

    backends = parse_backends(args.backend)  # unknown names -> InputSpecError before any work
    if args.threads < 1:
        raise errors.InputSpecError("--threads must be at least 1.")
    if args.min_time <= 0 or args.timeout <= 0 or args.mem_limit <= 0 or args.max_rounds < 1:
        raise errors.InputSpecError("--min-time, --timeout, --mem-limit and --max-rounds must be positive.")
    settings = Settings(level=args.ort_level, threads=args.threads, provider=args.provider,
                        disabled_optimizers=tuple(args.disable_optimizer),
                        denormal_as_zero=args.denormal_as_zero, backend=backends[0])
    for v in args.variant:
        _parse_variant(v)  # validate flags before loading anything
    if getattr(args, "freeze", None) and (args.whatif or args.reference):
        raise errors.InputSpecError("--freeze applies to --variant (and the default variants), not to --whatif "
                                    "or --reference.")
    loaded, plan, shapes, feeds = common.load_with_plan(args)  # the inputs verify uses, checked on the original
    variants = build_variants(loaded.proto, args, settings, shapes, common.freeze_of(args, plan))
    measured = experiment_run.plan(variants)
    for line in measured.notes():
        common.progress(line)
    on = f" on {', '.join(backends)}" if len(backends) > 1 else ""
    common.progress(f"benchmarking {len(measured.variants)} variants of {loaded.name}{on} ({settings.describe()})")
    last = [-1]

    def on_progress(frac: float, msg: str) -> None:
        pct = int(frac * 100)
        if msg.startswith("round") and pct == last[0]:
            return
        last[0] = pct
        common.progress(f"[{pct:3d}%] {msg}")

    results, measured = experiment_run.measure(measured, shapes=plan.shapes(), feeds=feeds, min_time_s=args.min_time,
                                max_rounds=args.max_rounds, timeout_s=args.timeout, mem_limit_mb=args.mem_limit,
                                profile=args.profile, verify_against=None if args.no_verify else loaded.proto,
                                progress=on_progress)
    from fusionviz.passes import run_pipeline

    # The original as loaded, and as the pipeline hands it on (what the what-if steps start from).
    seen_by_passes = run_pipeline(loaded.proto, [], shapes=shapes, keep_snapshots=False, validate=False,
                                  near_misses=False).original
    originals = measured.labels_of(loaded.proto, seen_by_passes)
    table = "\n".join([_fmt_table(results, originals), *_whatif_lines(results),
                       *_backend_lines(results)])
    for r in results:
        if r.error is not None and r.backend != "ort":
            common.progress(f"{r.label}: {r.error}")
    if args.json == "-":
        common.progress(table)
    else:
        print(table)
    if args.json:
        common.write_json({"model": loaded.name, "sha256": loaded.sha256,
                    "variants": [r.as_dict() for r in results], "same_as": dict(measured.same_as)}, args.json)
    return 0
