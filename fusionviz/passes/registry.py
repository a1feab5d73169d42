"""Every pass, in canonical order; lookup by name.

Passes are found, not listed: every module of the family packages in :data:`_MODULES`
(``simplify``, ``fuse``, ``layout``, ``precision``) is imported, and every :class:`Pass`
subclass with a ``name`` defined there is registered. Adding a pass is adding a module.
A plain module in :data:`_MODULES` (tests add one) contributes the passes defined in it.

Each pass declares its canonical position (``order``, within its category's range:
:data:`fusionviz.passes.base.ORDER_RANGES`). Running any subset keeps that order, so toggling
one pass never reorders the others.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Iterable
from types import ModuleType

from fusionviz import errors
from fusionviz.passes.base import ORDER_RANGES, Pass

_MODULES = (
    "fusionviz.passes.simplify",
    "fusionviz.passes.fuse",
    "fusionviz.passes.layout",
    "fusionviz.passes.precision",
)

_CACHE: list[Pass] | None = None


def _modules(name: str) -> list[ModuleType]:
    """The module ``name`` and, for a package, every module below it."""
    mod = importlib.import_module(name)
    found = [mod]
    for info in pkgutil.walk_packages(getattr(mod, "__path__", []), prefix=f"{name}."):
        found.append(importlib.import_module(info.name))
    return found


def _declared(mod: ModuleType) -> list[type[Pass]]:
    return [obj for obj in vars(mod).values()
            if isinstance(obj, type) and issubclass(obj, Pass) and obj.__module__ == mod.__name__ and obj.name]


def _check_order(cls: type[Pass]) -> None:
    ranges = ORDER_RANGES.get(cls.category, ())
    if ranges and not any(cls.order in r for r in ranges):
        allowed = ", ".join(f"{r.start}-{r.stop - 1}" for r in ranges)
        raise RuntimeError(f"pass {cls.name}: order {cls.order} is outside its category's range ({allowed})")


def all_passes() -> list[Pass]:
    """Instances of every registered pass, in canonical order."""
    global _CACHE
    if _CACHE is None:
        found: list[type[Pass]] = []
        for name in _MODULES:
            for mod in _modules(name):
                found.extend(cls for cls in _declared(mod) if cls not in found)
        names = [p.name for p in found]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise RuntimeError(f"duplicate pass names: {sorted(dupes)}")
        for cls in found:
            _check_order(cls)
        found.sort(key=lambda cls: cls.order)
        _CACHE = [cls() for cls in found]
    return list(_CACHE)


def pass_names() -> list[str]:
    return [p.name for p in all_passes()]


def canonical_name(name: str) -> str | None:
    """The pass's name for ``name`` (its own name, or an earlier name it declares as an alias)."""
    for p in all_passes():
        if p.name == name or name in p.aliases:
            return p.name
    return None


def get_pass(name: str) -> Pass:
    known = canonical_name(name)
    for p in all_passes():
        if p.name == known:
            return p
    spelled = {n: p.name for p in all_passes() for n in (p.name, *p.aliases)}
    close = list(dict.fromkeys(spelled[c] for c in difflib.get_close_matches(name, list(spelled), n=3)))
    hint = f" Did you mean: {', '.join(close)}?" if close else " Run 'python -m fusionviz passes' to list them."
    raise errors.InputSpecError(f"Unknown pass '{name}'.{hint}")


def resolve(names: Iterable[str]) -> list[Pass]:
    """Pass instances for ``names``, de-duplicated, in canonical order."""
    wanted = {get_pass(n.strip()).name for n in names if n and n.strip()}
    return [p for p in all_passes() if p.name in wanted]


def default_passes() -> list[str]:
    """What ``--all`` runs: every pass that keeps outputs equal (no precision passes), less those
    that say why not (``Pass.not_in_all``: measured slower on onnxruntime's CPU provider)."""
    return [p.name for p in all_passes() if p.exact and not p.not_in_all]


def mirroring(level: str) -> list[str]:
    """The passes that declare they make a rewrite onnxruntime's ``level`` makes
    (:attr:`fusionviz.passes.base.Pass.mirrors_ort`), in canonical order."""
    return [p.name for p in all_passes() if p.mirrors_ort == level]
