"""The report's JSON text: strict JSON, NaN and infinities as strings (rule 5 of
:mod:`fusionviz.report`). A leaf module, so that :mod:`fusionviz.report_html` can embed the text
without importing :mod:`fusionviz.report` back."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any


def _finite(obj: Any) -> Any:
    """Rule 5: NaN and infinities as strings, everywhere in ``obj``."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if isinstance(obj, Mapping):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _default(o: Any) -> Any:
    fn = getattr(o, "as_dict", None)
    if callable(fn):
        return fn()
    item = getattr(o, "item", None)  # numpy scalars
    if callable(item):
        return item()
    return str(o)


def to_json(report: Mapping[str, Any]) -> str:
    """The report as indented, strict JSON text (rule 5)."""
    return json.dumps(_finite(json.loads(json.dumps(report, default=_default))), indent=2, allow_nan=False)
