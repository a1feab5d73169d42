"""Pass engine: individually toggleable passes, a canonical-order pipeline, provenance."""

from fusionviz.passes.base import Category, Change, ChangeKind, Pass
from fusionviz.passes.pipeline import PassReport, PipelineResult, Snapshot, run_pipeline
from fusionviz.passes.registry import all_passes, get_pass, pass_names, resolve

__all__ = [
    "Category",
    "Change",
    "ChangeKind",
    "Pass",
    "PassReport",
    "PipelineResult",
    "Snapshot",
    "all_passes",
    "get_pass",
    "pass_names",
    "resolve",
    "run_pipeline",
]
