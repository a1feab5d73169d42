"""Every pass, in canonical order; lookup by name.

Pass modules list their passes in ``PASSES``; each pass has an ``order`` number that fixes
where it runs: simplify 100-199, fuse 200-389, precision 400-409, layout/memory 410-499.
One simplification runs late on purpose: ``dedup_initializers`` (390), after the fusions,
because merging equal weights makes them shared, and a shared weight blocks BatchNorm folding.
Precision passes run on the fused graph but before the layout pass: int8 quantization cannot
read onnxruntime's NCHWc kernels (it would quantize nothing) and fp16 would wrap each of them
in Casts, while the layout capture handles a quantized or fp16 graph as it is.
Running any subset keeps that order, so toggling one pass never reorders the others.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from fusionviz import errors
from fusionviz.passes.base import Pass

_MODULES = (
    "fusionviz.passes.simplify",
    "fusionviz.passes.fuse_conv",
    "fusionviz.passes.fuse_matmul",
    "fusionviz.passes.fuse_norm_act",
    "fusionviz.passes.fuse_transformer",
    "fusionviz.passes.layout",
    "fusionviz.passes.denormal",
    "fusionviz.passes.precision",
)

_CACHE: list[Pass] | None = None


def all_passes() -> list[Pass]:
    """Instances of every registered pass, in canonical order."""
    global _CACHE
    if _CACHE is None:
        import importlib

        found: list[type[Pass]] = []
        for mod_name in _MODULES:
            mod = importlib.import_module(mod_name)
            found.extend(getattr(mod, "PASSES", []))
        names = [p.name for p in found]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise RuntimeError(f"duplicate pass names: {sorted(dupes)}")
        found.sort(key=lambda cls: getattr(cls, "order", 1000))
        _CACHE = [cls() for cls in found]
    return list(_CACHE)


def pass_names() -> list[str]:
    return [p.name for p in all_passes()]


def get_pass(name: str) -> Pass:
    for p in all_passes():
        if p.name == name:
            return p
    close = difflib.get_close_matches(name, pass_names(), n=3)
    hint = f" Did you mean: {', '.join(close)}?" if close else " Run 'python -m fusionviz passes' to list them."
    raise errors.InputSpecError(f"Unknown pass '{name}'.{hint}")


def resolve(names: Iterable[str]) -> list[Pass]:
    """Pass instances for ``names``, de-duplicated, in canonical order."""
    wanted = {get_pass(n.strip()).name for n in names if n and n.strip()}
    return [p for p in all_passes() if p.name in wanted]


def default_passes() -> list[str]:
    """Everything that keeps outputs equal (no precision passes): what ``--all`` runs."""
    return [p.name for p in all_passes() if p.exact]
