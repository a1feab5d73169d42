"""Measure an experiment's variants: each distinct variant once, every label gets its result.

:func:`measure` is :func:`fusionviz.bench.identity.measure_once` around
:func:`fusionviz.bench.run_benchmark`: the CLI bench, the Benchmark page, tune and the case
studies measure through it, so the same model and settings asked for under two labels (the
current selection and the last cumulative step, say) is measured once.
"""

from __future__ import annotations

from collections.abc import Sequence

from fusionviz.experiment.variant import Variant


def measure(variants, **kwargs):
    """Measure ``variants`` (keyword arguments as :func:`fusionviz.bench.run_benchmark`).

    Args:
        variants: the variants, or :func:`plan`'s answer for them (to tell the user first).

    Returns:
        (results, measured): one :class:`fusionviz.bench.BenchResult` per requested label, in
        the order asked, and the :class:`fusionviz.bench.identity.Measured` that says which
        label was measured as which.
    """
    from fusionviz.bench import identity, run_benchmark

    measured = variants if isinstance(variants, identity.Measured) else plan(variants)
    return measured.expand(run_benchmark(list(measured.variants), **kwargs)), measured


def plan(variants: Sequence[Variant]):
    """Which of ``variants`` are measured and which label stands for which
    (:func:`fusionviz.bench.identity.measure_once`)."""
    from fusionviz.bench import identity

    return identity.measure_once(variants)
