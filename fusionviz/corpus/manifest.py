"""The wild corpus's manifest: what each pinned model is, read and checked from ``manifest.json``.

``manifest.json`` beside this file pins each model: the PyPI package and exact version, the wheel
file name, the ``.onnx`` member inside the wheel, its sha256 and size, its declared inputs, and
what a runner must know to feed it. :func:`load_manifest` reads and checks it (one
:class:`CorpusError` naming the entry and the field); :func:`select` picks entries;
:mod:`fusionviz.corpus.fetch` downloads and extracts them.

Hints (``CorpusEntry.hints``) say how to build inputs the model accepts:

- ``shapes``: ``{input: [d0, d1, ...]}`` a concrete shape for an input whose declared dims are
  symbolic or constrained (silero needs >= 512 samples, PP-OCR sides must be multiples of 32).
- ``values``: ``{input: scalar}`` fill the whole input with this value (``sr=16000``, masks of 1).
- ``ranges``: ``{input: [lo, hi]}`` integer values drawn from ``[lo, hi)`` (token ids, byte
  values), also for float-typed inputs that carry ids (tf2onnx embeddings).

Any other symbolic dim is 1; other float inputs are standard normal; other integer inputs are
drawn from ``[0, 10)``; other bool inputs are True. ``benchmarks/wild.py`` hands ``shapes`` and ``values`` to
:func:`fusionviz.inputs.plan_inputs`.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from fusionviz.errors import FusionvizError

#: The pinned list of models.
MANIFEST_PATH = Path(__file__).resolve().with_name("manifest.json")

#: Every tag an entry may carry.
TAGS = frozenset({
    "paddle", "tf2onnx", "pytorch", "qdq", "dynamic_quant", "if", "loop", "scan", "dynamic_dims",
    "scalar_input", "int_input", "fp16", "transformer", "audio", "detection", "ocr", "classifier",
    "external_data", "nhwc", "text", "vision", "synthetic",
})
#: What a derived entry may be built as (see the module docstring).
DERIVE_KINDS = frozenset({"fp16", "external_data"})

_DTYPES = frozenset({"float32", "float16", "float64", "int32", "int64", "int8", "uint8", "bool"})
_HINT_KEYS = frozenset({"shapes", "values", "ranges"})
_REQUIRED = {
    "name": str, "package": str, "version": str, "wheel": str, "member": str,
    "extra_members": list, "sha256": str, "bytes": int, "nodes": int, "opset": int,
    "producer": str, "tags": list, "inputs": list, "hints": dict, "ci": bool, "notes": str,
}
_WHEEL_KEYS = ("wheel", "member")
_OPTIONAL = {"extra_sha256": list, "derive": dict}
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
_VERSION_RE = re.compile(r"^[0-9][0-9A-Za-z.+!-]*$")



class CorpusError(FusionvizError):
    """The manifest is malformed, or a model could not be fetched."""

    exit_code = 1


class CorpusIntegrityError(CorpusError):
    """Bytes taken out of a wheel do not match the sha256 pinned in the manifest."""


@dataclasses.dataclass(frozen=True)
class DeclaredInput:
    """One graph input as the model declares it (in the manifest; what to feed it is
    :mod:`fusionviz.inputs`'s).

    Attributes:
        name: input name.
        dtype: numpy dtype name (``float32``, ``int64``, ``bool``, ...).
        shape: declared dims; ints are fixed (Paddle exports may declare ``-1``), strings are
            symbolic, ``"?"`` is a dim with neither a value nor a name.
    """

    name: str
    dtype: str
    shape: tuple[int | str, ...]


@dataclasses.dataclass(frozen=True)
class Derivation:
    """How a derived entry is built from another entry (see the module docstring).

    Attributes:
        source: name of the entry it is built from (a wheel entry).
        kind: one of :data:`DERIVE_KINDS`.
    """

    source: str
    kind: str


@dataclasses.dataclass(frozen=True)
class CorpusEntry:
    """One pinned model of the wild corpus (see ``manifest.json``).

    Attributes:
        name: short unique snake_case id.
        package: PyPI project name (of the source, for a derived entry).
        version: exact version of ``package``.
        wheel: the wheel file name the pins were taken from (empty for a derived entry).
        member: path of the ``.onnx`` file inside the wheel (empty for a derived entry).
        extra_members: further wheel members the model needs (external data), placed next to
            the model under the same relative names.
        sha256: hex sha256 of the ``.onnx`` bytes.
        bytes: size of the ``.onnx`` file.
        nodes: top-level node count.
        opset: default-domain opset.
        producer: ``producer_name producer_version`` (may be empty).
        tags: categories, a subset of :data:`TAGS`.
        inputs: declared graph inputs (initializers excluded).
        hints: what a runner must know to feed the model (see the module docstring).
        ci: part of the small, fast subset.
        notes: one sentence on what the model is.
        derive: how the model is built from another entry, or None for a wheel's model.
        extra_sha256: hex sha256 of each file of :meth:`extra_relpaths`, in that order.
    """

    name: str
    package: str
    version: str
    wheel: str
    member: str
    sha256: str
    bytes: int
    nodes: int
    opset: int
    producer: str
    tags: tuple[str, ...]
    inputs: tuple[DeclaredInput, ...]
    hints: Mapping[str, Any] = dataclasses.field(compare=False, repr=False)
    ci: bool = False
    notes: str = ""
    extra_members: tuple[str, ...] = ()
    derive: Derivation | None = None
    extra_sha256: tuple[str, ...] = ()

    @property
    def filename(self) -> str:
        """File name of the model in the cache (the member's base name, or ``<name>.onnx``)."""
        if self.derive is not None:
            return f"{self.name}.onnx"
        return PurePosixPath(self.member).name

    @property
    def megabytes(self) -> float:
        """Size of the ``.onnx`` file in MB (10**6 bytes)."""
        return self.bytes / 1e6

    @property
    def requirement(self) -> str:
        """``package==version`` as pip takes it."""
        return f"{self.package}=={self.version}"

    def extra_relpaths(self) -> tuple[PurePosixPath, ...]:
        """Files next to the model that it needs, relative to its folder.

        The :attr:`extra_members` relative to the folder of :attr:`member`, or for a derived
        ``external_data`` entry its data file ``<name>.data``.
        """
        if self.derive is not None:
            if self.derive.kind == "external_data":
                return (PurePosixPath(f"{self.name}.data"),)
            return ()
        base = PurePosixPath(self.member).parent
        return tuple(PurePosixPath(m).relative_to(base) for m in self.extra_members)



def _fail(where: str, message: str) -> CorpusError:
    return CorpusError(f"{MANIFEST_PATH.name}: {where}: {message}")


def _safe_member(path: str, where: str) -> None:
    p = PurePosixPath(path)
    if not path or p.is_absolute() or ".." in p.parts or "\\" in path:
        raise _fail(where, f"unsafe member path {path!r}")


def normalize_dist(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _parse_entry(raw: Any, index: int) -> CorpusEntry:
    where = f"entry {index}"
    if not isinstance(raw, dict):
        raise _fail(where, "is not an object")
    where = f"entry {index} ({raw.get('name', '?')!r})"
    derived = "derive" in raw
    required = {k: v for k, v in _REQUIRED.items() if not (derived and k in _WHEEL_KEYS)}
    for key in required:
        if key not in raw:
            raise _fail(where, f"missing {key!r}")
    for key, kind in {**required, **_OPTIONAL}.items():
        value = raw.get(key)
        if key in raw and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
            raise _fail(where, f"{key!r} must be {kind.__name__}")
    unknown = set(raw) - set(required) - set(_OPTIONAL)
    if unknown:
        raise _fail(where, f"unknown keys {sorted(unknown)}"
                    + (" (a derived entry has no wheel or member)" if derived else ""))
    if not _NAME_RE.match(raw["name"]):
        raise _fail(where, "name must be snake_case")
    if not _VERSION_RE.match(raw["version"]):
        raise _fail(where, f"version {raw['version']!r} is not an exact version")
    if not _SHA_RE.match(raw["sha256"]):
        raise _fail(where, "sha256 must be 64 lowercase hex digits")
    if raw["bytes"] <= 0:
        raise _fail(where, "bytes must be positive")
    derive = _parse_derive(raw, where) if derived else None
    wheel, member = raw.get("wheel", ""), raw.get("member", "")
    if derive is None:
        parts = wheel[:-4].split("-") if wheel.endswith(".whl") else []
        if len(parts) not in (5, 6) or parts[1] != raw["version"] \
                or normalize_dist(parts[0]) != normalize_dist(raw["package"]):
            raise _fail(where,
                        f"wheel {wheel!r} is not a wheel of {raw['package']}=={raw['version']}")
        _safe_member(member, where)
        if not member.endswith(".onnx"):
            raise _fail(where, "member must be an .onnx file")
    elif raw["extra_members"]:
        raise _fail(where, "a derived entry has no extra_members")
    base = PurePosixPath(member).parent
    for extra in raw["extra_members"]:
        if not isinstance(extra, str):
            raise _fail(where, "extra_members must be strings")
        _safe_member(extra, where)
        if base not in PurePosixPath(extra).parents:
            raise _fail(where, f"extra member {extra!r} is not under {str(base)!r}")
    bad_tags = [t for t in raw["tags"] if t not in TAGS]
    if bad_tags or not raw["tags"]:
        raise _fail(where, f"unknown or missing tags {bad_tags}")
    if derive is not None and derive.kind not in raw["tags"]:
        raise _fail(where, f"a derived {derive.kind} entry must be tagged {derive.kind!r}")
    inputs = []
    for spec in raw["inputs"]:
        if not isinstance(spec, dict) or set(spec) != {"name", "dtype", "shape"}:
            raise _fail(where, "each input needs exactly name, dtype and shape")
        if spec["dtype"] not in _DTYPES:
            raise _fail(where, f"input {spec['name']!r} has unknown dtype {spec['dtype']!r}")
        dims = spec["shape"]
        if not isinstance(dims, list) or not all(
                isinstance(d, str) or (isinstance(d, int) and not isinstance(d, bool)) for d in dims):
            raise _fail(where, f"input {spec['name']!r} has a malformed shape")
        inputs.append(DeclaredInput(spec["name"], spec["dtype"], tuple(dims)))
    entry = CorpusEntry(
        name=raw["name"], package=raw["package"], version=raw["version"], wheel=wheel,
        member=member, sha256=raw["sha256"], bytes=raw["bytes"], nodes=raw["nodes"],
        opset=raw["opset"], producer=raw["producer"], tags=tuple(raw["tags"]),
        inputs=tuple(inputs), hints=raw["hints"], ci=raw["ci"], notes=raw["notes"],
        extra_members=tuple(raw["extra_members"]), derive=derive,
        extra_sha256=tuple(raw.get("extra_sha256", ())),
    )
    extras = entry.extra_relpaths()
    if len(entry.extra_sha256) != len(extras) \
            or not all(isinstance(h, str) and _SHA_RE.match(h) for h in entry.extra_sha256):
        raise _fail(where, f"extra_sha256 must pin each of the {len(extras)} extra file(s) "
                           "with 64 lowercase hex digits")
    _check_hints(entry, where)
    return entry


def _parse_derive(raw: dict, where: str) -> Derivation:
    spec = raw["derive"]
    if set(spec) != {"from", "kind"} or not all(isinstance(v, str) for v in spec.values()):
        raise _fail(where, "derive needs exactly the strings 'from' and 'kind'")
    if spec["kind"] not in DERIVE_KINDS:
        raise _fail(where, f"derive kind {spec['kind']!r} is not one of {sorted(DERIVE_KINDS)}")
    if spec["from"] == raw["name"]:
        raise _fail(where, "an entry cannot be derived from itself")
    return Derivation(spec["from"], spec["kind"])


def _check_hints(entry: CorpusEntry, where: str) -> None:
    hints = entry.hints
    unknown = set(hints) - _HINT_KEYS
    if unknown:
        raise _fail(where, f"unknown hint keys {sorted(unknown)}")
    declared = {spec.name: spec for spec in entry.inputs}
    for key in _HINT_KEYS & set(hints):
        if not isinstance(hints[key], dict):
            raise _fail(where, f"hint {key!r} must be an object")
        for name in hints[key]:
            if name not in declared:
                raise _fail(where, f"hint {key!r} names unknown input {name!r}")
    for name, dims in hints.get("shapes", {}).items():
        spec = declared[name]
        if not isinstance(dims, list) or len(dims) != len(spec.shape) or not all(
                isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims):
            raise _fail(where, f"shape hint for {name!r} must be {len(spec.shape)} positive ints")
        for want, have in zip(spec.shape, dims, strict=True):
            if isinstance(want, int) and want > 0 and want != have:
                raise _fail(where, f"shape hint for {name!r} contradicts fixed dims {spec.shape}")
    for name, bounds in hints.get("ranges", {}).items():
        if not (isinstance(bounds, list) and len(bounds) == 2
                and all(isinstance(b, int) for b in bounds) and bounds[0] < bounds[1]):
            raise _fail(where, f"range hint for {name!r} must be [lo, hi] with lo < hi")


def load_manifest(path: Path | None = None) -> list[CorpusEntry]:
    """Read and validate the manifest.

    Args:
        path: another manifest file; default :data:`MANIFEST_PATH`.

    Returns:
        The entries in file order.

    Raises:
        CorpusError: the file is missing, not JSON, or an entry is malformed or a duplicate.
    """
    path = MANIFEST_PATH if path is None else path
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CorpusError(f"cannot read corpus manifest {path}: {exc}") from exc
    if not isinstance(data, list):
        raise CorpusError(f"corpus manifest {path} must hold a JSON list")
    entries = [_parse_entry(raw, i) for i, raw in enumerate(data)]
    by_name: dict[str, CorpusEntry] = {}
    for entry in entries:
        if entry.name in by_name:
            raise CorpusError(f"corpus manifest {path}: duplicate name {entry.name!r}")
        by_name[entry.name] = entry
    for entry in entries:
        if entry.derive is None:
            continue
        source = by_name.get(entry.derive.source)
        if source is None or source.derive is not None:
            raise CorpusError(f"corpus manifest {path}: {entry.name!r} is derived from "
                              f"{entry.derive.source!r}, which is not a wheel entry of it")
        if (entry.package, entry.version) != (source.package, source.version):
            raise CorpusError(f"corpus manifest {path}: {entry.name!r} must keep the package "
                              f"and version of its source {source.name!r}")
    return entries


def select(entries: Iterable[CorpusEntry], *, ci: bool = False,
           only: Sequence[str] | None = None) -> list[CorpusEntry]:
    """Pick entries by the ``ci`` flag and/or by name.

    Args:
        entries: entries to choose from.
        ci: keep only the fast CI subset.
        only: keep only these names (in manifest order).

    Returns:
        The chosen entries.

    Raises:
        CorpusError: a name in ``only`` is not in ``entries``.
    """
    entries = list(entries)
    if only:
        known = {e.name for e in entries}
        missing = [n for n in only if n not in known]
        if missing:
            raise CorpusError(f"unknown corpus model(s): {', '.join(missing)}")
        entries = [e for e in entries if e.name in set(only)]
    if ci:
        entries = [e for e in entries if e.ci]
    return entries

