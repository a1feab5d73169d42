"""The pass contract, modelled on onnx-ir's pass infrastructure (``onnx_ir.passes.PassBase``).

A pass is a class that declares what it is and implements one method, ``transform``:

1. **Identity and explanation**: ``name`` (snake_case: CLI, URLs), ``title``, ``category``,
   ``explain`` (markdown for the user: what, why faster, the math).
2. **Canonical position**: ``order``. The pipeline runs any subset in ascending ``order``, so
   toggling one pass never reorders the others (ranges per category: :data:`ORDER_RANGES`).
3. **Trigger**: ``trigger_ops``, op types of which one must be present, else the pass is skipped
   at no cost and the report says why.
4. **In place or functional** (onnx-ir's ``in_place`` / ``changes_input``): ``in_place = True``
   passes change the model they are given and return None (or that model); ``in_place = False``
   passes return a new model, or None to keep the one they were given; ``changes_input`` says
   whether such a pass may also change the model it was given (only when it does not can the
   pipeline keep that model after the pass fails).
   ``apply`` checks the declaration: a pass that breaks it fails with a :class:`PassContractError`.
5. **Preconditions** (``requires``) and **postconditions** (``ensures``) raise
   :class:`PreconditionError` / :class:`PostconditionError` with one sentence; ``apply`` checks
   them around ``transform``. The pipeline reports an unmet precondition as *skipped* with that
   sentence, and rolls back a broken postcondition and reports the pass as *declined*. Common to every pass, checked by the
   pipeline: the model is not malformed (:mod:`fusionviz.passes.validate`) before the first
   pass, and the validity rule (:mod:`fusionviz.passes.validity`) holds after.
6. **Shapes and numerics**: ``needs_shapes`` (the pipeline infers shapes first),
   ``refines_shapes`` (its result may let inference learn more), ``exact`` (outputs must stay
   equal; False for precision passes).

``transform`` may return an :class:`Outcome` to add the Changes the bookkeeping cannot see
(weight values rewritten in place, a measured error). The bookkeeping itself is
:meth:`Pass.apply`, which no pass overrides (a subclass that tries is refused at class
creation): node identity before/after becomes Changes (:mod:`fusionviz.passes.changes`), with
provenance stamped on every new node (:mod:`fusionviz.passes.provenance`).

A pass that finds nothing returns no changes; it never raises for a model it does not apply to.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from typing import ClassVar

import onnx_ir as ir

from fusionviz.passes.changes import Change, ChangeKind, diff_changes, initializer_changes
from fusionviz.passes.provenance import (
    PASSES_KEY,
    SOURCES_KEY,
    ensure_unique_names,
    node_passes,
    node_sources,
    snapshot_nodes,
)
from fusionviz.passes.walk import all_nodes

__all__ = [
    "PASSES_KEY",
    "SOURCES_KEY",
    "Category",
    "Change",
    "ChangeKind",
    "Outcome",
    "Pass",
    "PassContractError",
    "PostconditionError",
    "PreconditionError",
    "all_nodes",
    "ensure_unique_names",
    "node_passes",
    "node_sources",
]

logger = logging.getLogger(__name__)


class Category(str, enum.Enum):
    SIMPLIFY = "simplify"
    FUSE = "fuse"
    LAYOUT = "layout-memory"
    PRECISION = "precision"


#: Rule 2: the canonical positions of each category. One simplification runs late on purpose:
#: ``eliminate_duplicate_initializers`` (390), after the fusions, because merging equal weights makes them
#: shared, and a shared weight blocks BatchNorm folding. Precision passes run on the fused graph
#: but before the layout pass: int8 quantization cannot read onnxruntime's NCHWc kernels and
#: fp16 would wrap each of them in Casts, while the layout capture takes a quantized or fp16
#: graph as it is. One layout pass runs before the fusions: ``widen_fp16_cpu`` (195) writes in
#: float32 what onnxruntime computes in float32 anyway, which the fusions then treat as float32.
ORDER_RANGES: dict[Category, tuple[range, ...]] = {
    Category.SIMPLIFY: (range(100, 195), range(390, 391)),
    Category.FUSE: (range(200, 390),),
    Category.PRECISION: (range(400, 410),),
    Category.LAYOUT: (range(195, 200), range(410, 500)),
}


class PreconditionError(Exception):
    """Rule 5: the model is not one this pass can run on (the message says why)."""


class PostconditionError(Exception):
    """Rule 5: the pass's result breaks what the pass promises (the message says how)."""


class PassContractError(RuntimeError):
    """Rule 4: a pass broke its own declaration (a bug in the pass)."""


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What ``transform`` may return instead of a bare model.

    Attributes:
        model: the new model (functional passes), or None: the model given, changed in place.
        changes: Changes the pass describes itself, added after the ones the bookkeeping finds.
    """

    model: ir.Model | None = None
    changes: tuple[Change, ...] = ()


_DECLARABLE = frozenset({"name", "aliases", "category", "order", "trigger_ops", "in_place", "changes_input"})


class Pass:
    """Base class. Subclasses set the class attributes and implement :meth:`transform`."""

    name: ClassVar[str] = ""
    #: earlier names of the pass, still accepted on the command line and in links
    aliases: ClassVar[tuple[str, ...]] = ()
    title: ClassVar[str] = ""
    category: ClassVar[Category] = Category.SIMPLIFY
    explain: ClassVar[str] = ""
    #: rule 2: canonical position (see :data:`ORDER_RANGES`)
    order: ClassVar[int] = 0
    #: rule 3: op types of which at least one must be in the model (empty: always run)
    trigger_ops: ClassVar[frozenset[str]] = frozenset()
    #: rule 4: True: changes the model it gets and returns None; False: returns a new model
    in_place: ClassVar[bool] = True
    #: rule 4: a functional pass that may also have changed the model it was given
    changes_input: ClassVar[bool] = False
    needs_shapes: ClassVar[bool] = False
    #: True when the pass can make shape inference learn more about values it did not create
    #: (the pipeline then re-infers shapes before the next pass that needs them).
    refines_shapes: ClassVar[bool] = False
    #: True when outputs must stay equal (fp32 tolerance); False for precision passes.
    exact: ClassVar[bool] = True
    #: Why ``--all`` (``registry.default_passes``) leaves this exact pass out, when it does: a
    #: rewrite measured slower on the CPU runtime than what it replaces stays a choice, not a default.
    not_in_all: ClassVar[str] = ""
    #: True for passes that rebuild the whole model and implement :meth:`origin_tensor`.
    uses_origin_hints: ClassVar[bool] = False
    #: The onnxruntime level (``fusionviz.ortlevels.LEVELS``) whose own optimizers make this
    #: rewrite, when the pass mirrors one; the Passes page's "What ORT basic does" preset is
    #: the passes that declare "basic".
    mirrors_ort: ClassVar[str | None] = None

    def __init_subclass__(cls, **declared) -> None:
        """``class P(Pass, name=..., category=..., order=..., trigger_ops=...)``: the declaration
        in the class statement (class attributes work too)."""
        unknown = set(declared) - _DECLARABLE
        if unknown:
            raise TypeError(f"{cls.__name__}: {sorted(unknown)} are not parts of the pass contract")
        for key, value in declared.items():
            setattr(cls, key, frozenset(value) if key == "trigger_ops" else value)
        super().__init_subclass__()
        if "apply" in vars(cls):
            raise TypeError(f"{cls.__name__} overrides Pass.apply: the bookkeeping is the engine's; "
                            "implement transform (and return an Outcome for extra Changes)")

    def origin_tensor(self, node: ir.Node) -> str | None:
        """For passes that rebuild the whole model (names of tensors change): the *original*
        output tensor whose producer ``node`` stands for, or None. When a pass overrides this,
        Changes are grouped by these hints instead of by shared tensors (see diff_changes)."""
        return None

    def applicable(self, ops: set[str]) -> bool:
        """Rule 3: False when the model (its op types: ``ops``) certainly gives this pass nothing to do."""
        return not self.trigger_ops or bool(self.trigger_ops & ops)

    def skip_reason(self) -> str:
        return "nothing to do: the model has no " + " / ".join(sorted(self.trigger_ops))

    def requires(self, model: ir.Model) -> None:
        """Rule 5: raise :class:`PreconditionError` when the pass cannot run on ``model``."""

    def ensures(self, model: ir.Model) -> None:
        """Rule 5: raise :class:`PostconditionError` when the result breaks the pass's promise."""

    def transform(self, model: ir.Model) -> ir.Model | Outcome | None:  # pragma: no cover - abstract
        """Change ``model`` in place (return None) or return a new model (rule 4)."""
        raise NotImplementedError

    def apply(self, model: ir.Model) -> tuple[ir.Model, list[Change]]:
        """Run :meth:`transform` with the bookkeeping; return the resulting model and its Changes.

        Like onnx-ir's ``PassBase.__call__``: :meth:`requires` first, :meth:`ensures` after;
        both raise (rule 5) and the pipeline turns that into *skipped* or *declined*.
        """
        self.requires(model)
        nodes = all_nodes(model)
        ensure_unique_names(model, nodes)
        before = snapshot_nodes(model, nodes)
        inits_before = dict(model.graph.initializers)  # name -> Value; sizes only for the gone ones
        inputs_before = {v.name for v in model.graph.inputs}
        result = self.transform(model)
        outcome = result if isinstance(result, Outcome) else Outcome(result)
        self._check_declaration(model, outcome.model)
        new_model = outcome.model if outcome.model is not None else model
        self.ensures(new_model)
        ensure_unique_names(new_model)
        hint = self.origin_tensor if self.uses_origin_hints else None
        changes = diff_changes(before, new_model, self.name, hint=hint)
        alive = {id(n) for n in all_nodes(new_model)}
        fed_removed = {i for r in before if id(r.node) not in alive for i in r.inputs}
        changes.extend(initializer_changes(inits_before, inputs_before, new_model, self.name, fed_removed))
        changes.extend(outcome.changes)
        return new_model, changes

    def _check_declaration(self, model: ir.Model, result: ir.Model | None) -> None:
        if self.in_place and result is not None and result is not model:
            raise PassContractError(f"the '{self.name}' pass is declared in place but returned a new model")
        if not self.in_place and result is model:
            raise PassContractError(f"the '{self.name}' pass is declared functional but returned the model "
                                    "it was given (return None when nothing changed)")

    @classmethod
    def info(cls) -> dict:
        return {
            "name": cls.name,
            "title": cls.title,
            "category": cls.category.value,
            "exact": cls.exact,
            "needs_shapes": cls.needs_shapes,
            "in_place": cls.in_place,
            "order": cls.order,
            "trigger_ops": sorted(cls.trigger_ops),
            "explain": cls.explain,
        }


