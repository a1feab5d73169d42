"""Display labels of variants: the one place they are made (for display only; nothing parses them).

A label is the role's words plus, after `` @``, where the variant's settings differ from the
run's:

==========  ================================  ==========================================
role        words                             e.g.
==========  ================================  ==========================================
original    ``original``                      ``original``, ``original @ORT all``
selection   its name                          ``current (3 passes)``, ``fused @OpenVINO``
step        ``+<pass>``                       ``+fold_batchnorm``
drop        ``-<pass>``                       ``-fuse_gelu``
all         ``all passes``                    ``all passes``
level       ``original`` (level always said)  ``original @ORT basic``
reference   the tool's name                   ``onnxslim``, ``ort:all``
backend     ``original`` (backend always)     ``original @OpenVINO``
==========  ================================  ==========================================

Without run settings (``run=None``) every label says its settings in full
(``our passes @ORT off``).
"""

from __future__ import annotations

from fusionviz.experiment.variant import (
    ALL,
    BACKEND,
    DROP,
    LEVEL,
    ORIGINAL,
    STEP,
    Role,
    Settings,
)

ALL_PASSES = "all passes"


def words(role: Role) -> str:
    """The role's words, without settings."""
    if role.kind == STEP:
        return f"+{role.name}"
    if role.kind == DROP:
        return f"-{role.name}"
    if role.kind == ALL:
        return ALL_PASSES
    if role.kind in (ORIGINAL, LEVEL, BACKEND):
        return ORIGINAL
    return role.name  # selection, reference


def runtime(settings: Settings) -> str:
    """``ORT <level>`` for onnxruntime, else the backend's title (``OpenVINO``)."""
    from fusionviz.backends.registry import TITLES

    return f"ORT {settings.level}" if settings.backend == "ort" else TITLES.get(settings.backend, settings.backend)


def where(settings: Settings, run: Settings | None) -> list[str]:
    """What to say about ``settings`` beside the run's: every difference (all of it without a run)."""
    parts: list[str] = []
    if run is None or settings.backend != run.backend or (settings.backend == "ort" and settings.level != run.level):
        parts.append(runtime(settings))
    base = run if run is not None else Settings(backend=settings.backend)
    if settings.disabled_optimizers != base.disabled_optimizers and settings.disabled_optimizers:
        parts.append("without " + ",".join(settings.disabled_optimizers))
    if settings.denormal_as_zero != base.denormal_as_zero:
        parts.append("denormals as zero" if settings.denormal_as_zero else "denormals kept")
    if settings.threads != base.threads:
        parts.append(f"{settings.threads} thread{'s' if settings.threads != 1 else ''}")
    if settings.provider != base.provider:
        parts.append(settings.provider.replace("ExecutionProvider", ""))
    if parts and parts[0] != runtime(settings):  # say where, then what else differs
        parts.insert(0, runtime(settings))
    return parts


def label(role: Role, settings: Settings, run: Settings | None = None) -> str:
    """The display label of a variant in ``role`` under ``settings`` in a run at ``run``."""
    parts = where(settings, run)
    if role.kind in (LEVEL, BACKEND) and not parts:  # the level or the runtime is the point
        parts.insert(0, runtime(settings))
    return words(role) + (" @" + ", ".join(parts) if parts else "")


def selection_name(passes) -> str:
    """The Benchmark page's name of the current selection: ``current (3 passes)``."""
    n = len(passes)
    return f"current ({n} pass{'es' if n != 1 else ''})"


def config_label(n_passes: int, settings: Settings) -> str:
    """A tuned configuration in brief: ``3 passes @ extended``, ``0 passes @ OpenVINO +DAZ``."""
    if settings.backend == "ort":
        where_ = settings.level + (f" -{','.join(settings.disabled_optimizers)}" if settings.disabled_optimizers else "")
    else:
        where_ = runtime(settings)
    return f"{n_passes} passes @ {where_}" + (" +DAZ" if settings.denormal_as_zero else "")
