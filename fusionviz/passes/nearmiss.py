"""Near misses: where a pass almost changed the model, and why it did not.

A pass that changes nothing is as much a result as one that fuses: the user sees a Conv and a
BatchNormalization side by side and asks why they stayed apart. While a pass runs, the pipeline
holds a :class:`Recorder`; the matchers report to it, and nothing else changes (a pass never
reads it). Rules (the code points back to them):

1. A *near miss* is a site that got past a pattern's anchor op and then failed: the nodes
   matched so far, the node where it stopped (the *blocker*), the failed condition as a sentence,
   what would make it fire where that is known (the *hint*), and a *kind* a test or a page can
   rely on (:data:`KINDS`). A near miss with no nodes is a reason for the pass as a whole.
2. onnxscript rules report through the matcher and the condition that
   :mod:`fusionviz.passes.rulefilter` wraps around every rule: a structural failure counts when
   at least half of the pattern's nodes (and two) matched; a failed ``check`` always counts
   (the whole pattern matched). Our own matchers call :func:`note`; a rule's check that
   reports its own near miss (or knows another rule reported the site) marks its failed
   result with :func:`reported`, and the wrapper adds none.
3. The library's failure texts are turned into sentences by :func:`from_match`: an op of the
   wrong type standing between two ops that would fuse ("an Add sits between ConvTranspose and
   BatchNormalization"), a QuantizeLinear/DequantizeLinear pair, x³ written as x·x·x, a value
   that is not a constant yet but comes from a Constant node (turn on ``fold_constants``),
   intermediate results used outside the pattern.
4. One near miss per site (its root node): the deepest. A site whose nodes the pass changed
   after all (another rule, a commuted copy, a later round) is dropped. At most :data:`LIMIT`
   per pass, deepest first; ``total`` says how many there were.
5. Recording costs nothing when no recorder is active (one context-variable read per failed
   match); the pipeline records for every pass it runs. Recording never breaks a pass: an
   error while describing a near miss is logged and the near miss dropped.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import logging
import re
from collections.abc import Iterable, Iterator, Sequence

import onnx_ir as ir

logger = logging.getLogger(__name__)

#: Rule 1: what kind of obstacle stopped the match.
KINDS = {
    "needs_pass": "another pass must run first",
    "in_between": "a node sits between the ops that would fuse",
    "qdq": "a QuantizeLinear/DequantizeLinear pair is in the way",
    "form": "written in a form the rule does not take",
    "other_uses": "an intermediate result is also used elsewhere",
    "condition": "a condition on values, types or shapes failed",
    "no_kernel": "onnxruntime has no kernel for the fused form",
    "pass": "a reason for the pass as a whole",
}

#: Rule 4: near misses kept per pass.
LIMIT = 50

#: Ops another pass removes: a node of this op in the way is fixed by turning that pass on.
REMOVED_BY = {
    "BatchNormalization": "fold_batchnorm",
    "Identity": "eliminate_identity",
    "Dropout": "eliminate_dropout",
    "Constant": "fold_constants",
}
_QDQ = {"QuantizeLinear", "DequantizeLinear"}
#: element-wise ops are everywhere: a node between one of them and the anchor is no near miss
_GENERIC = {"Add", "Sub", "Mul", "Div"}
#: what may stand "between" two ops that would fuse: cheap one-tensor steps a pass or a
#: rewrite could remove or absorb (a MatMul or Gather in between is another computation)
_BETWEEN = {"Add", "Sub", "Mul", "Div", "Cast", "Identity", "Dropout", "Reshape", "Squeeze", "Unsqueeze",
            "Flatten", "Transpose", "BatchNormalization", "QuantizeLinear", "DequantizeLinear", "Pad"}


@dataclasses.dataclass(frozen=True)
class NearMiss:
    """One site where a rule almost fired (rule 1). Node names refer to the model the pass got."""

    rule: str
    nodes: tuple[str, ...]
    blocker: str | None
    reason: str
    hint: str = ""
    kind: str = "condition"

    @property
    def site(self) -> tuple[str, ...]:
        """Every node the near miss names (matched nodes and the blocker)."""
        return self.nodes + ((self.blocker,) if self.blocker and self.blocker not in self.nodes else ())

    def describe(self) -> str:
        """One line: "at Add_3: an Add sits between … (hint)"."""
        where = f"at {self.blocker}: " if self.blocker else ""
        return where + self.reason + (f" — {self.hint}" if self.hint else "")

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> NearMiss:
        return cls(d.get("rule", ""), tuple(d.get("nodes", ())), d.get("blocker"), d.get("reason", ""),
                   d.get("hint", ""), d.get("kind", "condition"))


class Recorder:
    """What one pass's matchers reported (rules 4)."""

    def __init__(self) -> None:
        self._best: dict[str, tuple[int, int, NearMiss]] = {}  # site -> (depth, order, near miss)

    def add(self, near: NearMiss, depth: int, site: str) -> None:
        got = self._best.get(site)
        if got is None or depth > got[0]:
            self._best[site] = (depth, got[1] if got else len(self._best), near)

    def result(self, alive: set[str]) -> tuple[tuple[NearMiss, ...], int]:
        """(kept near misses, total): sites whose nodes all still exist in ``alive``."""
        kept = [(d, o, n) for d, o, n in self._best.values() if all(x in alive for x in n.site)]
        kept.sort(key=lambda t: (-t[0], t[1]))
        return tuple(n for _, _, n in kept[:LIMIT]), len(kept)


_CURRENT: contextvars.ContextVar[Recorder | None] = contextvars.ContextVar("fusionviz_near_misses", default=None)


@contextlib.contextmanager
def recording() -> Iterator[Recorder]:
    """Collect the near misses reported inside the block (one pass)."""
    rec = Recorder()
    token = _CURRENT.set(rec)
    try:
        yield rec
    finally:
        _CURRENT.reset(token)


def active() -> bool:
    """Whether a recorder listens (rule 5: callers skip building a near miss otherwise)."""
    return _CURRENT.get() is not None


def _name(x: ir.Node | str | None) -> str | None:
    if x is None or isinstance(x, str):
        return x
    return x.name


def note(nodes: Iterable[ir.Node | str], blocker: ir.Node | str | None, reason: str, *, hint: str = "",
         kind: str = "condition", rule: str = "", depth: int | None = None) -> None:
    """Report a near miss to the active recorder (no-op without one)."""
    rec = _CURRENT.get()
    if rec is None:
        return
    names = tuple(dict.fromkeys(n for n in (_name(x) for x in nodes) if n))
    b = _name(blocker)
    near = NearMiss(rule, names, b, reason, hint, kind)
    site = names[0] if names else (b or f"pass:{reason}")
    rec.add(near, len(names) + (1 if b else 0) if depth is None else depth, site)


#: Rule 2: the attribute :func:`reported` sets on a failed MatchResult
REPORTED = "fusionviz_near_miss_reported"


def reported(result):
    """Mark a failed match result as already reported (rule 2); returns it."""
    setattr(result, REPORTED, True)
    return result


def fixable(blocker: ir.Node | None, hint: str, kind: str) -> dict:
    """``hint`` and ``kind`` for a blocker that another pass removes (rule 3: "turn on X first"),
    else the ones given (an attention ``Reject``'s own hint wins)."""
    fixer = REMOVED_BY.get(blocker.op_type) if blocker is not None else None
    if fixer and not hint:
        return {"hint": f"turn on {fixer} first (it removes the {blocker.op_type})", "kind": "needs_pass"}
    return {"hint": hint, "kind": kind}


# --------------------------------------------------------------------------- rule 3: sentences


def _producer(v: ir.Value | None) -> ir.Node | None:
    return v.producer() if v is not None else None


def _constant_source(v: ir.Value, depth: int = 6) -> ir.Node | None:
    """The Constant node (or foldable chain ending in one) ``v`` comes from, else None."""
    node = _producer(v)
    for _ in range(depth):
        if node is None:
            return None
        if node.op_type == "Constant":
            return node
        ins = [i for i in node.inputs if i is not None]
        if not ins or any(i.const_value is None and _producer(i) is None for i in ins):
            return None
        node = next((_producer(i) for i in ins if i.const_value is None), None)
    return None


def _in_the_way(found: ir.Node, expected: str) -> ir.Node | None:
    """The node made by ``expected`` that ``found`` (one step, or a QDQ pair) reads, if any."""
    for v in found.inputs:
        p = _producer(v)
        if p is None:
            continue
        if p.op_type == expected:
            return p
        if found.op_type in _QDQ and p.op_type in _QDQ:
            for w in p.inputs:
                q = _producer(w)
                if q is not None and q.op_type == expected:
                    return q
    return None


def _never_raises(fn):
    """Rule 5: describing a near miss must not fail the pass that is matching."""

    @functools.wraps(fn)
    def safe(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception:  # noqa: BLE001 - a near miss is a report, never a reason to fail
            logger.debug("near miss not recorded", exc_info=True)
            return False

    return safe


def _a(word: str) -> str:
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


@_never_raises
def between(rule: str, root: ir.Node, found: ir.Node, expected: str, matched: Sequence[ir.Node] = ()) -> bool:
    """Report ``found`` standing where ``root`` needs an ``expected`` producer, when an
    ``expected`` node sits right above it (rule 3). Returns whether it reported."""
    if expected in _GENERIC or found.op_type not in _BETWEEN:
        return False
    above = _in_the_way(found, expected)
    if above is None:
        return False
    nodes = [above, *matched, root]
    if found.op_type in _QDQ:
        note(nodes, found, f"a QuantizeLinear/DequantizeLinear pair sits between {expected} and {root.op_type}",
             hint="the fused kernel takes float tensors; onnxruntime runs QDQ groups with its QDQ transformers",
             kind="qdq", rule=rule, depth=len(nodes) + 1)
        return True
    fix = fixable(found, "", "in_between")
    note(nodes, found, f"{_a(found.op_type)} sits between {expected} ({above.name}) and {root.op_type}",
         hint=fix["hint"] or f"the rule needs {root.op_type} to read {expected}'s output directly",
         kind=fix["kind"], rule=rule, depth=len(nodes) + 1)
    return True


_OPTYPE = re.compile(r"OpType mismatch: expected (?:\w+\.)?(\w+)(?:\(\))?, got (\w+)")
_NOT_CONST = re.compile(r"Value (.*) is not a constant(?:, expecting ([-+.\w]+))?")
_CONST_MISMATCH = re.compile(r"(?:Constant )?[Vv]alue mismatch: expected (.+), got (.+?)\.?$")


def _outside_use(nodes: Sequence[ir.Node], root: ir.Node | None = None) -> tuple[ir.Node | None, ir.Node | None]:
    """(matched node, the first node outside ``nodes`` that reads one of its outputs); the
    ``root``'s readers do not count (its output is what the rewrite replaces)."""
    inside = {id(n) for n in nodes}
    for n in nodes:
        if n is root:
            continue
        for v in n.outputs:
            for use in v.uses():
                if id(use.node) not in inside:
                    return n, use.node
    return None, None


@_never_raises
def from_match(rule: str, root: ir.Node, matched: Sequence[ir.Node], reason: str,
               sources: Sequence[object], *, condition: bool) -> None:
    """Report an onnxscript match that failed (rules 2, 3): ``matched`` so far, the library's
    ``reason`` and failure ``sources`` (nodes or values). A node with more inputs than the
    pattern's is another form of the op (a LayerNormalization that already has its bias), not
    a near miss."""
    if reason.startswith("Number of inputs"):
        return False
    failed_node = next((s for s in sources if isinstance(s, ir.Node)), None)
    failed_value = next((s for s in sources if isinstance(s, ir.Value)), None)
    nodes = list(matched) or [root]
    kind, hint, blocker = ("condition" if condition else "form"), "", failed_node
    text = reason.strip() or "the rule's condition failed"
    nc = _NOT_CONST.search(text)
    if nc and failed_value is None and failed_node is not None:
        failed_value = next((v for v in failed_node.inputs if v is not None and v.name == nc.group(1)), None)
    if failed_value is not None:
        prod = _producer(failed_value)
        src = prod if prod is not None and prod.op_type == "Constant" else _constant_source(failed_value)
        if src is not None:
            kind, blocker = "needs_pass", src
            made = "held in a Constant node" if prod is src else f"computed by {prod.op_type} from a Constant node"
            text = f"'{failed_value.name}' is {made}, not a constant initializer"
            hint = "turn on fold_constants first (it turns Constant nodes into initializers)"
        elif blocker is None and prod is not None:
            blocker = prod
    m = _OPTYPE.search(text)
    if m and failed_node is not None:
        expected, got = m.group(1), m.group(2)
        if expected == "Pow" and got == "Mul":
            kind, text = "form", f"x³ is written as x·x·x ({failed_node.name}) where the rule's form has Pow(x, 3)"
        elif got in _QDQ:
            kind, text = "qdq", f"a {got} stands where the pattern needs {expected}"
            hint = "the fused kernel takes float tensors; onnxruntime runs QDQ groups with its QDQ transformers"
        else:
            consumer = next((n for n in nodes if any(v.producer() is failed_node for v in n.inputs if v is not None)),
                            root)
            if between(rule, consumer, failed_node, expected, [n for n in nodes if n is not consumer]):
                return
            text = f"{failed_node.name} is a {got} where the pattern needs {expected}"
    elif "other uses" in text:
        inner, outside = _outside_use(nodes, root)
        kind, blocker = "other_uses", outside or blocker
        if inner is not None and outside is not None:
            text = (f"{inner.op_type} {inner.name}'s output also feeds {outside.op_type} {outside.name}, "
                    "outside the pattern, so the matched nodes cannot be replaced")
        else:
            text = "a matched node's output is a graph output or has other uses, so the nodes cannot be replaced"
    elif nc and kind != "needs_pass":
        blocker = blocker or root
        where = f"{blocker.op_type} {blocker.name}" if blocker is not None else "a node"
        expect = (nc.group(2) or "").rstrip(".")
        if expect == "0.044715" and blocker is not None and blocker.op_type == "Mul":
            text = (f"0.044715·x³ is written as a chain of Muls ({blocker.name}: x·(x·(0.044715·x)) or similar) "
                    "where the rule's form has 0.044715·Pow(x, 3)")
        elif expect:
            text = f"{where} reads '{nc.group(1)}', a computed value, where the form has the constant {expect}"
    elif (c := _CONST_MISMATCH.search(text)) and failed_node is None:
        text = f"a constant is {c.group(2)} where the form needs {c.group(1)}"
    note(nodes, blocker if blocker is not None else root, text.rstrip("."), hint=hint, kind=kind, rule=rule,
         depth=len(nodes) + (100 if condition else 0))
