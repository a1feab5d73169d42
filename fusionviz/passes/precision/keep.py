"""Nodes the user asks to keep in float32 through a precision pass (``optimize --keep-fp32``).

The request holds for the passes run inside :func:`keeping_fp32` (a context variable, so two
pipelines in two threads do not see each other's list): fp16 adds the names to the
converter's node block list, int8_dynamic and int8_static to ``nodes_to_exclude``. The names are
node names of the model the pass receives (``python -m fusionviz compare`` on a precision
result lists the nodes that add the most error, ready for this list: :mod:`fusionviz.lossy`).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator

_KEEP: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("fusionviz_keep_fp32", default=())

REASON = "kept float32 on request (--keep-fp32)"


@contextlib.contextmanager
def keeping_fp32(names: Iterable[str]) -> Iterator[None]:
    """Within this block, precision passes keep the nodes ``names`` in float32."""
    token = _KEEP.set(tuple(dict.fromkeys(n for n in names if n)))
    try:
        yield
    finally:
        _KEEP.reset(token)


def requested() -> tuple[str, ...]:
    """The node names to keep in float32 in the current block (none outside one)."""
    return _KEEP.get()
