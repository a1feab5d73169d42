"""What a sweep covers: the models, the pass sets (variants), the backends, and each cell's key.

Rules:

1. ``MODELS`` are ``.onnx`` files, folders (every ``.onnx`` inside, recursively, sorted), a
   sample name, ``wild`` (the built-in corpus manifest) or the path of a manifest ``.json``;
   corpus models are fetched into the corpus cache first (:mod:`fusionviz.corpus`). A manifest
   entry that cannot be fetched is still a model of the sweep: its cells become error rows.
2. ``--passes`` is a comma-separated list of items: ``each`` (every pass alone), ``all`` (the
   default pass set), ``original`` (no pass), a pass name (that pass alone) or ``a+b+c`` (those
   passes together, one variant).
3. A cell is one model × variant × backend. Its key (:func:`cell_key`) is the sha256 of the
   model file, the ordered pass list, the backend and the versions of fusionviz, onnx,
   onnxruntime, onnxscript (and the backend's runtime): a rerun skips a cell whose key is in the
   store, and a new version of any of them redoes it. Model names are not part of the key.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path

from fusionviz import errors

logger = logging.getLogger(__name__)

#: The name of the built-in corpus manifest on the command line.
WILD = "wild"


class SweepError(errors.InputSpecError):
    """A sweep cannot start: bad models, passes, backends, output path or Ray setup."""


@dataclasses.dataclass(frozen=True)
class ModelRef:
    """One model of a sweep.

    Attributes:
        name: unique display name (the file stem, or the corpus entry's name).
        path: the ``.onnx`` file, or "" when it could not be provided (see ``problem``).
        sha256: sha256 of the file's bytes ("" when there is no file).
        problem: why the model cannot be checked (a failed fetch), else "".
    """

    name: str
    path: str
    sha256: str
    problem: str = ""


@dataclasses.dataclass(frozen=True)
class PassSet:
    """One variant: a label and the passes it runs, in order.

    Attributes:
        label: the variant's name in tables (``all``, a pass name, ``a+b``, ``original``).
        passes: pass names in the order given.
    """

    label: str
    passes: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Cell:
    """One unit of work and of the store: model × variant × backend.

    Attributes:
        model: the model.
        variant: the pass set.
        backend: the backend's registry name (``ort``, ``openvino``).
        key: :func:`cell_key` of the three.
    """

    model: ModelRef
    variant: PassSet
    backend: str
    key: str


def parse_passes(text: str) -> list[PassSet]:
    """The variants named by ``--passes`` (rule 2), without repeats, in the order given.

    Args:
        text: e.g. ``"each"``, ``"all"``, ``"fold_batchnorm,fuse_conv_activation"``,
            ``"all,fold_batchnorm+fuse_conv_affine"``.

    Returns:
        One :class:`PassSet` per variant.

    Raises:
        SweepError: an unknown pass name or an empty list.
    """
    from fusionviz.passes import registry

    out: list[PassSet] = []
    seen: set[str] = set()

    def add(label: str, passes: Sequence[str]) -> None:
        if label not in seen:
            seen.add(label)
            out.append(PassSet(label, tuple(passes)))

    for raw in str(text or "").split(","):
        item = raw.strip()
        if not item:
            continue
        if item == "each":
            for name in registry.pass_names():
                add(name, [name])
        elif item == "all":
            add("all", registry.default_passes())
        elif item == "original":
            add("original", [])
        else:
            names = [n.strip() for n in item.split("+") if n.strip()]
            try:
                canon = [registry.get_pass(n).name for n in names]
            except errors.FusionvizError as exc:
                raise SweepError(f"--passes: {exc}") from None
            if not canon:
                raise SweepError(f"--passes item '{errors.printable(item, 60)}' names no pass.")
            add("+".join(canon), canon)
    if not out:
        raise SweepError("--passes names no variant; use each, all or pass names (a,b or a+b).")
    return out


def parse_backends(text: str | None) -> tuple[str, ...]:
    """``"ort,openvino"`` → canonical backend names; each must be usable here.

    Raises:
        SweepError: an unknown backend, or one this machine cannot run.
    """
    from fusionviz.backends import registry

    try:
        names = registry.parse_backends(text)
    except errors.FusionvizError as exc:
        raise SweepError(f"--backends: {exc}") from None
    for name in names:
        why = registry.get_backend(name).available()
        if why is not None:
            raise SweepError(f"The {registry.TITLES.get(name, name)} backend is not available here: {why}")
    return names


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes (read in blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _unique(name: str, taken: set[str]) -> str:
    base, k = name, 2
    while name in taken:
        name = f"{base}_{k}"
        k += 1
    taken.add(name)
    return name


def _corpus_refs(manifest: Path | None, taken: set[str]) -> list[ModelRef]:
    from fusionviz.corpus import CorpusError, fetch_corpus, load_manifest

    try:
        entries = load_manifest(manifest)
        fetched = fetch_corpus(entries)
    except CorpusError as exc:
        raise SweepError(str(exc)) from None
    failures = {f.name: f.reason for f in fetched.failures}
    refs = []
    for entry in entries:
        name = _unique(entry.name, taken)
        if entry.name in fetched:
            path = Path(fetched[entry.name])
            refs.append(ModelRef(name, str(path), entry.sha256))
        else:
            why = failures.get(entry.name, "not fetched")
            logger.warning("corpus model %s not fetched: %s", entry.name, why)
            refs.append(ModelRef(name, "", "", problem=f"the corpus model could not be fetched: {why}"))
    return refs


def resolve_models(items: Iterable[str]) -> list[ModelRef]:
    """The models named by ``MODELS`` (rule 1), with unique names.

    Args:
        items: command-line ``MODELS`` arguments.

    Returns:
        One :class:`ModelRef` per model, in the order given.

    Raises:
        SweepError: an argument is neither a file, a folder with ``.onnx`` files, a sample,
            ``wild`` nor a manifest; or nothing was named.
    """
    from fusionviz import samples

    refs: list[ModelRef] = []
    taken: set[str] = set()
    for item in items:
        p = Path(item)
        if item == WILD and not p.exists():
            refs += _corpus_refs(None, taken)
        elif p.is_file() and p.suffix.lower() == ".json":
            refs += _corpus_refs(p, taken)
        elif p.is_file():
            refs.append(ModelRef(_unique(p.stem, taken), str(p.resolve()), file_sha256(p)))
        elif p.is_dir():
            found = sorted(q for q in p.rglob("*.onnx") if q.is_file())
            if not found:
                raise SweepError(f"The folder '{errors.printable(item, 200)}' holds no .onnx file.")
            for q in found:
                stem = str(q.relative_to(p).with_suffix("")).replace("/", "__")
                refs.append(ModelRef(_unique(stem, taken), str(q.resolve()), file_sha256(q)))
        elif item in samples.sample_names():
            q = samples.sample_path(item)
            refs.append(ModelRef(_unique(item, taken), str(q.resolve()), file_sha256(q)))
        else:
            raise SweepError(f"'{errors.printable(item, 200)}' is not a model file, a folder, a sample, "
                             f"'{WILD}' or a corpus manifest .json.")
    if not refs:
        raise SweepError("No models to sweep.")
    return refs


@functools.cache
def versions(backend: str = "ort") -> dict[str, str]:
    """Versions that decide whether a stored cell is still valid (rule 3).

    Args:
        backend: the backend; its runtime's version is added when it is not onnxruntime.

    Returns:
        ``{"fusionviz": ..., "onnx": ..., "onnxruntime": ..., "onnxscript": ...[, backend: ...]}``.
    """
    from importlib import metadata

    import fusionviz

    out = {"fusionviz": fusionviz.__version__}
    for dist in ("onnx", "onnxruntime", "onnxscript"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "missing"
    if backend != "ort":
        from fusionviz.backends import registry

        out[backend] = registry.get_backend(backend).version() or "missing"
    return out


def cell_key(model_sha256: str, passes: Sequence[str], backend: str) -> str:
    """The store key of a cell (rule 3): a sha256 hex digest."""
    blob = json.dumps([model_sha256, list(passes), backend, versions(backend)], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def build_cells(models: Sequence[ModelRef], variants: Sequence[PassSet],
                backends: Sequence[str]) -> list[Cell]:
    """Every model × variant × backend, model-major (the order of the output table)."""
    cells = []
    for m in models:
        for v in variants:
            for b in backends:
                key = cell_key(m.sha256 or f"missing:{m.name}", v.passes, b)
                cells.append(Cell(m, v, b, key))
    return cells
