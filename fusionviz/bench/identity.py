"""What a variant is: its model and its settings, whatever it is called.

Rules:

1. Two variants are **the same variant** when their models serialize to the same bytes and their
   :class:`~fusionviz.bench.Settings` are equal (onnxruntime level, threads, provider, disabled
   optimizers, denormals, backend). The label plays no part: the Benchmark page's
   ``current (3 passes)`` and the cumulative what-if's last step ``+fuse_gelu`` are one variant
   when the passes that changed nothing leave the same model; a reference optimizer's result
   and the original are two, though neither has fusionviz passes.
2. Each variant is **measured once** (:func:`measure_once`), under the first label it was asked
   for; every other label of it gets a copy of that result (with its own label and passes) and
   :attr:`Measured.same_as` says which label was measured. A paired ratio between two labels of
   one variant is exactly 1.
3. One label for two different variants is an error (a label names one thing).
4. **The original at the same settings** (:func:`original_at`): the variant every other is
   compared with, one for each setting; a variant whose model is the original's *is* the
   original at its settings.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Iterable, Mapping, Sequence

import onnx

from fusionviz import errors
from fusionviz.bench.records import BenchResult, Settings, Variant

logger = logging.getLogger(__name__)


def model_digest(model: onnx.ModelProto | bytes) -> str:
    """sha256 of the model's serialized bytes."""
    data = model if isinstance(model, bytes) else model.SerializeToString()
    return hashlib.sha256(data).hexdigest()


@dataclasses.dataclass(frozen=True)
class VariantKey:
    """Rule 1: what a variant is."""

    model_sha256: str
    settings: Settings


def variant_key(variant: Variant) -> VariantKey:
    """The :class:`VariantKey` of ``variant`` (rule 1)."""
    return VariantKey(model_digest(variant.model_bytes()), variant.settings)


@dataclasses.dataclass(frozen=True)
class Measured:
    """Requested variants, the ones to measure, and which label stands for which.

    Attributes:
        requested: one variant per distinct label, in the order asked.
        variants: what to measure: one per distinct :class:`VariantKey` (rule 2).
        same_as: for each requested label that is not measured itself, the label that is.
        keys: every requested label's :class:`VariantKey`.
    """

    requested: tuple[Variant, ...]
    variants: tuple[Variant, ...]
    same_as: Mapping[str, str]
    keys: Mapping[str, VariantKey]

    def expand(self, results: Sequence[BenchResult]) -> list[BenchResult]:
        """One result per requested label, in the order asked (rule 2).

        Args:
            results: the results of :attr:`variants`, in their order.
        """
        by = {r.label: r for r in results}
        out = []
        for v in self.requested:
            r = by[self.same_as.get(v.label, v.label)]
            out.append(r if r.label == v.label else dataclasses.replace(r, label=v.label, passes=v.passes, role=v.role))
        return out

    def notes(self) -> list[str]:
        """One line per label measured as another: ``'+fuse_gelu' is the same model and
        settings as 'current (3 passes)': measured once``."""
        return [f"'{label}' is the same model and settings as '{kept}': measured once"
                for label, kept in self.same_as.items()]

    def labels_of(self, *models: onnx.ModelProto | bytes) -> list[str]:
        """The requested labels whose model is one of ``models`` (any settings): e.g. the model
        as loaded and as the pass pipeline hands it on (unnamed nodes named, ``--shape`` fixed),
        both of them the original."""
        shas = {model_digest(m) for m in models}
        return [v.label for v in self.requested if self.keys[v.label].model_sha256 in shas]


def measure_once(variants: Iterable[Variant]) -> Measured:
    """Rules 1-3 over ``variants``.

    Raises:
        fusionviz.errors.InputSpecError: one label names two different variants.
    """
    requested: list[Variant] = []
    keys: dict[str, VariantKey] = {}
    first: dict[VariantKey, str] = {}
    same_as: dict[str, str] = {}
    unique: list[Variant] = []
    for v in variants:
        key = variant_key(v)
        if v.label in keys:
            if keys[v.label] != key:
                raise errors.InputSpecError(f"Variant label '{v.label}' names two different variants; "
                                            "labels must be unique.")
            continue
        keys[v.label] = key
        requested.append(v)
        if key in first:
            same_as[v.label] = first[key]
        else:
            first[key] = v.label
            unique.append(v)
    if same_as:
        logger.info("measured once: %s", "; ".join(f"{a} = {b}" for a, b in same_as.items()))
    return Measured(tuple(requested), tuple(unique), same_as, keys)


def original_at(results: Sequence[BenchResult], originals: Iterable[str], settings: Settings) -> BenchResult | None:
    """Rule 4: the measured original under ``settings`` among ``results``, or None.

    Args:
        results: benchmark results.
        originals: the labels whose model is the original (:meth:`Measured.labels_of`).
        settings: the settings to match exactly.
    """
    names = set(originals)
    return next((r for r in results if r.label in names and r.settings == settings and r.stats is not None), None)
