"""fold_constants: compute ahead of time every node whose inputs are all known."""

from __future__ import annotations

import logging

import onnx_ir as ir
from onnx_ir.passes.common import LiftConstantsToInitializersPass

from fusionviz.passes import nearmiss
from fusionviz.passes.base import Category, Pass
from fusionviz.passes.cleanup import Cleanup
from fusionviz.passes.facts import is_onnx
from fusionviz.passes.hygiene import (
    absent_outputs,
    forget_contradicted_output_shapes,
    forget_negative_dims,
    restore_absent_outputs,
    unique_value_names,
)
from fusionviz.passes.rewrite import MAX_ROUNDS
from fusionviz.passes.shapes import strict_inference_error
from fusionviz.passes.simplify.folder import (
    DEFAULT_FOLD_MAX_MB,
    FOLD_MAX_MB_ENV,
    FoldOnlyConstants,
    fold_budget_bytes,
)

logger = logging.getLogger(__name__)

def pin_initializer_inputs(model: ir.Model) -> int:
    """Drop initializers from the main graph's inputs (IR < 4 style); return how many.

    Such an initializer is a default a caller could override, so no folder touches it; models
    exported for inference (like onnx's light models) list every weight that way. The IR
    version is raised to 4, the first that allows initializers that are not inputs.
    """
    graph = model.graph
    keep = [v for v in graph.inputs if not v.is_initializer()]
    dropped = len(graph.inputs) - len(keep)
    if dropped:
        graph.inputs.clear()
        graph.inputs.extend(keep)
        if model.ir_version < 4:
            model.ir_version = 4
    return dropped


class ConstantFolding(Pass, name="fold_constants", aliases=("constant_folding",), category=Category.SIMPLIFY, order=110):
    """Wraps onnxscript's FoldConstantsPass and onnx-ir's LiftConstantsToInitializersPass."""

    mirrors_ort = "basic"

    title = "Constant folding"
    needs_shapes = True
    refines_shapes = True
    # Folds in place; when it declines, or folds the main graph only, it returns a model rebuilt
    # from the copy it kept, so the model it was given may have changed either way.
    in_place = False
    changes_input = True
    explain = f"""\
**What:** computes every node whose inputs are all known before run time and stores the result
as an initializer (a weight): `Shape` of a statically shaped tensor, the `Gather`/`Concat`/`Cast`
chains built on it, `ConstantOfShape` (how onnx's light models create their weights), arithmetic
on weights, and `CastLike(constant, x)` where `x`'s type is known. `Constant` nodes are lifted to
initializers, and the nodes left without consumers are removed. Initializers that are also
listed as graph inputs (old IR < 4 exports list every weight that way, which makes them
overridable and so not constant) are taken out of the input list first, as onnxruntime's
`remove_initializer_from_input` tool does; the model's real inputs stay the same.

**Why faster:** the work is done once, here, instead of on every inference; the graph gets
smaller; and later passes need constants — BatchNorm can only be folded into a Conv whose
weights are known numbers, not the output of `ConstantOfShape` or `CastLike`/`Expand` chains.

**Control flow:** an `If` whose condition is a constant (often a shape test, once `--shape`
fixed the input shapes) is replaced by the branch it always takes: the branch's nodes move
into the enclosing graph, values it reads from outside stay connected, and the If's output
names are kept (a branch that returns an outside value gets an `Identity` carrying the name).
An If whose branch makes a value of another rank, size or dtype than the If declares is kept.
When specializing leaves a branch that can never run with the given shapes failing shape
inference (an 8 kHz path fed 16 kHz frames), the folding is redone on the main graph only.

**Declared shapes:** a graph output size the folded graph provably does not make (an
example input's length baked into a dynamic dim) becomes unknown; a `-1` stored as a dimension
(Paddle's "unknown") too. A declared *rank* the graph contradicts cannot be repaired without
changing the model's interface: then the pass declines and changes nothing.

**Limits:** nodes with random outputs, quantize/dequantize (they carry the quantization) and
loops are never folded. Folding can *grow* a model (a `ConstantOfShape` becomes a full
tensor), so one run creates at most `{FOLD_MAX_MB_ENV}` MB of new constant data (default
{DEFAULT_FOLD_MAX_MB}); nodes past that budget stay as they are.
Wraps `onnxscript.optimizer.FoldConstantsPass` (its Identity/Dropout/Cast/Expand shortcuts on
run-time tensors are left to the passes of those names).
"""

    def transform(self, model: ir.Model) -> ir.Model | None:
        pinned = pin_initializer_inputs(model)
        if pinned:
            logger.info("fold_constants: %d initializers removed from the graph inputs", pinned)
        forget_negative_dims(model)
        # Folding specializes control flow: an If with a constant condition becomes its branch,
        # and the other branches' shapes become known. A branch that cannot run with the given
        # input shapes (an 8 kHz path fed 16 kHz frames) then fails shape inference, which it
        # passed while its shapes were unknown. Then fold again, the main graph only.
        # A fold that still fails inference (a declared output rank the graph contradicts) is
        # declined: the model is handed back as it came.
        from fusionviz.model_io import ir_model  # weights kept on disk are read from their folder

        backup = ir.serde.serialize_model(model)
        _fold(model, specialize=True)
        why = _settle(model)
        if why is None or strict_inference_error(backup) is not None:
            return None  # valid, or it failed inference before: folding is not to blame
        if any(is_onnx(n, "If") for n in backup.graph.node):
            logger.info("fold_constants: folding control flow left a branch that fails shape inference "
                        "(%s); folding the main graph only", why)
            plain = ir_model(backup)
            _fold(plain, specialize=False)
            why = _settle(plain)
            if why is None:
                return plain
        logger.info("fold_constants: declined, the folded model fails shape inference: %s", why)
        return ir_model(backup)


def _settle(model: ir.Model) -> str | None:
    """Why the folded model fails strict shape inference, after forgetting declared output sizes
    the folding proved wrong (:func:`fusionviz.passes.hygiene.forget_contradicted_output_shapes`);
    None when it passes."""
    why = strict_inference_error(model)
    if why is None:
        return None
    dropped = forget_contradicted_output_shapes(model)
    if not dropped:
        return why
    logger.info("fold_constants: the model declares sizes for output(s) %s that the graph does not make; "
                "they are made unknown", ", ".join(dropped))
    return strict_inference_error(model)


def _fold(model: ir.Model, *, specialize: bool) -> None:
    """The folding rounds, the lifting of Constant nodes, and the cleanup (rule 1), in place."""
    cleanup = Cleanup(model)
    absent = absent_outputs(model)  # the folder's name fixing would name (request) them
    budget = fold_budget_bytes()
    folder = FoldOnlyConstants(budget, specialize=specialize)
    for _ in range(MAX_ROUNDS):
        folder.made_nodes = False
        result = folder(model)
        if not result.modified or not folder.made_nodes:
            break
    LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0)(model)
    cleanup.prune(model)
    restore_absent_outputs(absent)
    unique_value_names(model)
    if folder.skipped:
        logger.info("fold_constants: %d nodes over the %d MB budget kept: %s", len(folder.skipped),
                    budget // (1024 * 1024), ", ".join(folder.skipped[:10]))
        for name in folder.skipped:
            nearmiss.note([name], name, f"its inputs are constant, but the result would make more than the "
                          f"{budget // (1024 * 1024)} MB of new constants one folding run may create",
                          hint="raise FUSIONVIZ_FOLD_MAX_MB to fold it", kind="condition", rule="fold")
