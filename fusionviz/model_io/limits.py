"""Size limits of loading (rule 2 of :mod:`fusionviz.model_io`), the machine they derive from, and
how sizes are written in their messages."""

from __future__ import annotations

import dataclasses
import logging
import os

from fusionviz import errors

logger = logging.getLogger(__name__)


MIN_IR_VERSION = 3


MIN_OPSET = 7


def _env_number(name: str, default: float, scale: int = 1) -> int:
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        logger.warning("ignoring %s=%r: not a number", name, os.environ.get(name))
        value = default
    return max(0, int(value * scale))


#: How a limit message says which setting raises the limit.
_RAISE_MODEL = " (set FUSIONVIZ_MAX_MODEL_MB to raise it)"


_RAISE_ARCHIVE = " (set FUSIONVIZ_MAX_ARCHIVE_MB to raise it)"


def _env_mb(name: str, default: float) -> int:
    return _env_number(name, default, 1024 * 1024)


def machine_memory_bytes() -> int:
    """Physical memory of this machine (0 when unknown)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def default_model_mb() -> float:
    """The default model-size limit in MB: half this machine's memory, at least 500 MB."""
    return max(500.0, machine_memory_bytes() / 2 / 1024 / 1024)


@dataclasses.dataclass(frozen=True)
class Limits:
    """Configurable limits (environment variables in brackets, sizes in MB).

    Attributes:
        max_model_bytes: largest model file or upload, external data included
            [FUSIONVIZ_MAX_MODEL_MB, default half the machine's memory, at least 500].
        max_archive_bytes: largest zip, and largest total uncompressed size of its members
            [FUSIONVIZ_MAX_ARCHIVE_MB, the model limit's default, at least 1000].
        max_archive_ratio: largest uncompressed/compressed ratio of a zip member above 1 MB
            (zip bombs) [FUSIONVIZ_MAX_ARCHIVE_RATIO, 200].
        max_archive_members: most members in a zip [FUSIONVIZ_MAX_ARCHIVE_MEMBERS, 10000].
        max_nodes: most nodes (subgraphs included) a model may have [FUSIONVIZ_MAX_NODES, 200000].
        weights_on_disk_bytes: a model whose weights (external data, or a one-file model's
            initializers) total at least this keeps them on disk (rule 9)
            [FUSIONVIZ_WEIGHTS_ON_DISK_MB, 256].
    """

    max_model_bytes: int = dataclasses.field(
        default_factory=lambda: _env_mb("FUSIONVIZ_MAX_MODEL_MB", default_model_mb())
    )
    max_archive_bytes: int = dataclasses.field(
        default_factory=lambda: _env_mb("FUSIONVIZ_MAX_ARCHIVE_MB", max(1000.0, default_model_mb()))
    )
    max_archive_ratio: float = dataclasses.field(
        default_factory=lambda: float(_env_number("FUSIONVIZ_MAX_ARCHIVE_RATIO", 200))
    )
    max_archive_members: int = dataclasses.field(
        default_factory=lambda: _env_number("FUSIONVIZ_MAX_ARCHIVE_MEMBERS", 10_000)
    )
    max_nodes: int = dataclasses.field(
        default_factory=lambda: _env_number("FUSIONVIZ_MAX_NODES", 200_000)
    )
    weights_on_disk_bytes: int = dataclasses.field(
        default_factory=lambda: _env_mb("FUSIONVIZ_WEIGHTS_ON_DISK_MB", 256)
    )


def _short(text: str, n: int = 120) -> str:
    text = errors.printable(" ".join(str(text).split()))
    return text if len(text) <= n else text[: n - 3] + "..."


def _size(n: int) -> str:
    if n < 10 * 1024:
        return f"{n} bytes"
    if n < 10 * 1024 * 1024:
        return f"{n / 1024:.1f} KB"
    if n < 10 * 1024 ** 3:
        return f"{n / 1024 / 1024:.1f} MB"
    return f"{n / 1024 ** 3:.2f} GB"


MAX_FOLDER_ENTRIES = 20_000
