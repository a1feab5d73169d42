"""onnxruntime optimization levels by the short names fusionviz uses everywhere."""

from __future__ import annotations

from fusionviz import errors

#: Every level, from none to all: the one list (the CLI's choices, the app's selectors, the
#: benchmark's settings, the reference optimizers' saved graphs).
LEVELS = ("off", "basic", "extended", "layout", "all")
#: The levels that optimize: every level but ``off``.
OPTIMIZING = LEVELS[1:]


def graph_optimization_level(level: str):
    import onnxruntime as ort

    table = {
        "off": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    layout = getattr(ort.GraphOptimizationLevel, "ORT_ENABLE_LAYOUT", None)
    table["layout"] = layout if layout is not None else ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    try:
        return table[level]
    except KeyError:
        raise errors.InputSpecError(f"Unknown onnxruntime level '{level}'; use one of {', '.join(LEVELS)}.") from None
