"""Collapse by structure (graphview/collapse.py rule 5) on the wild corpus: which models have no
name scopes to collapse, how many blocks each gets, and what the Graph page draws with them.

    .venv/bin/python benchmarks/bench_blocks.py                       # every cached corpus model
    .venv/bin/python benchmarks/bench_blocks.py --models ppocr_v4_det,open_nsfw_tf2onnx

For each model: the app's first selection of passes (every simplify and fuse pass), the before (original) and after snapshots, and
``render_graph(..., collapse=True, structure=before)`` on both sides as the Graph page draws them.
Prints one row per model: how it collapses (``scopes`` or ``blocks``), nodes before / after, items
drawn before / after,
blocks (repeated + regions) found on the before snapshot, the nodes they cover, the boxes drawn in
each pane, and the seconds the block search took. Models are read from the corpus cache
(``python -m fusionviz.corpus.fetch``); one not cached is skipped.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("FUSIONVIZ_PREFETCH", "0")


def main(argv: list[str] | None = None) -> int:
    import onnx

    from fusionviz.corpus import cache_dir
    from fusionviz.graphview import RenderOptions, diff_models, render_graph
    from fusionviz.graphview.build import _display_graph
    from fusionviz.graphview.collapse import name_scopes_useful, structural_blocks
    from fusionviz.passes import all_passes, run_pipeline

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="", help="comma-separated corpus names (default: every cached one)")
    args = ap.parse_args(argv)
    base = Path(cache_dir()) / "models"
    names = [n for n in args.models.split(",") if n] or sorted(p.name for p in base.iterdir() if p.is_dir())
    print(f"{'model':32s} {'how':6s} {'nodes b/a':>10s} {'drawn b/a':>10s} {'blocks':>12s} {'covered':>8s} "
          f"{'boxes b/a':>10s} {'search s':>8s}")
    for name in names:
        found = sorted(glob.glob(str(base / name / "*.onnx")))
        if not found:
            print(f"{name:32s} (not cached)")
            continue
        model = onnx.load(found[0])
        passes = [p.name for p in all_passes() if p.category.value in ("simplify", "fuse")]  # the app's first selection
        result = run_pipeline(model, passes, validate=False, near_misses=False)
        before, after = result.snapshots[0].model, result.snapshots[-1].model
        dg = _display_graph(before)
        if name_scopes_useful(dg):
            print(f"{name:32s} {'scopes':6s} {len(dg.nodes):>10d}")
            continue
        t0 = time.perf_counter()
        blocks = structural_blocks(dg)
        took = time.perf_counter() - t0
        kinds = set(blocks.values())
        repeated = sum(1 for k in kinds if k[0].startswith("block "))
        diff = diff_models(before, after)
        opts = RenderOptions(collapse=True)
        rb = render_graph(before, diff=diff, side="before", options=opts, structure=before)
        ra = render_graph(after, diff=diff, side="after", options=opts, structure=before)
        print(f"{name:32s} {'blocks':6s} {f'{rb.total}/{ra.total}':>10s} {f'{rb.drawn}/{ra.drawn}':>10s} "
              f"{f'{len(kinds)} ({repeated}+{len(kinds) - repeated})':>12s} {len(blocks):>8d} "
              f"{f'{len(rb.scope_ids)}/{len(ra.scope_ids)}':>10s} {took:8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
