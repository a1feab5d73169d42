"""Denormal flush: set subnormal float weights to zero when the outputs stay equal.

Rules:

1. Every fp32 and fp64 initializer is scanned; a value is *denormal* when ``0 < |x| < tiny``
   (``tiny`` = smallest normal: 1.1754944e-38 for fp32, 2.2250738585072014e-308 for fp64).
   fp16 weights are not: onnxruntime's CPU kernels compute fp16 in fp32, where an fp16
   subnormal (6e-08 to 6.1e-05) is a normal number (no slow path to avoid), and zeroing it
   changes results by far more than fp32 rounding (2 % on an fp16 speech model).
2. None found: no change.
3. An initializer that reaches a Log, a divisor, a Sqrt, a Reciprocal or a Pow base (through
   an additive op: an epsilon such as ``log(x + 1e-40)``) is never flushed: zero there makes
   the output infinite exactly when the guarded tensor is 0, which random test inputs never
   show (:mod:`fusionviz.passes.guards`).
4. Found: a candidate model with those values set to +0 (sign kept: -0.0 for negatives) is
   compared with the current one in onnxruntime (optimizations off, deterministic inputs,
   1e-4 relative). Within tolerance: the flush is applied and reported as one Change per
   initializer group with the counts; beyond tolerance, or when the comparison cannot run, the
   model is left alone and the reason is logged and reported in :attr:`DenormalFlush.last_reason`.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx_ir as ir

from fusionviz.passes.base import Category, Change, ChangeKind, Outcome, Pass
from fusionviz.passes.facts import release
from fusionviz.passes.guards import singular_path

logger = logging.getLogger(__name__)

_TINY = {np.dtype(np.float32): np.finfo(np.float32).tiny, np.dtype(np.float64): np.finfo(np.float64).tiny}


def count_denormals(array: np.ndarray) -> int:
    """Number of subnormal values in a float array (0 for other dtypes)."""
    tiny = _TINY.get(array.dtype)
    if tiny is None:
        return 0
    flat = array.reshape(-1)
    step = 1 << 22  # 4M values at a time: the temporaries stay small for a weight of any size
    count = 0
    for start in range(0, flat.size, step):
        a = np.abs(flat[start:start + step])
        count += int(np.count_nonzero((a > 0) & (a < tiny)))
    return count


def flush_denormals(array: np.ndarray) -> np.ndarray:
    """A copy with subnormal values replaced by signed zeros."""
    tiny = _TINY[array.dtype]
    out = array.copy()
    mask = (np.abs(out) < tiny) & (out != 0)
    out[mask] = np.copysign(np.zeros((), out.dtype), out[mask])
    return out


def guarded_singularity(value: ir.Value) -> str | None:
    """Rule 3: why ``value`` must keep its exact value (the op it guards), or None."""
    path = singular_path(value)
    if not path:
        return None
    return f"'{value.name}' guards {path[-1].op_type} '{path[-1].name}'"


def find_denormal_initializers(model: ir.Model) -> dict[str, tuple[np.ndarray, int]]:
    """Initializer name -> (array, denormal count), for those with any (rules 1 and 3)."""
    found: dict[str, tuple[np.ndarray, int]] = {}
    for name, value in model.graph.initializers.items():
        t = value.const_value
        if t is None or t.dtype not in (ir.DataType.FLOAT, ir.DataType.DOUBLE):  # rule 1: not fp16
            continue
        try:
            arr = t.numpy()
        except Exception:  # noqa: BLE001 - unreadable tensors are skipped
            continue
        n = count_denormals(arr)
        if not n:
            del arr
            release(t)  # a weight kept on disk, read: unmapped again (only the ones found stay)
            continue
        why = guarded_singularity(value)
        if why:
            logger.info("denormal_flush: %d denormal value(s) kept: %s", n, why)
            continue
        found[name] = (arr, n)
    return found


class DenormalFlush(Pass, name="denormal_flush", category=Category.LAYOUT, order=450):
    title = "Flush denormal weights to zero"
    needs_shapes = False
    explain = """\
**What:** finds float weights in the *denormal* (subnormal) range — `0 < |x| < 1.1754944e-38`
for fp32 — reports how many there are, and sets them to zero, but only after checking in
onnxruntime that the outputs stay within 1e-4 relative; otherwise it changes nothing and says why.

**Why faster:** x86 CPUs handle denormal operands in microcode: an FMA that touches one can take
~100 cycles instead of ~4. Trained weights that decayed towards zero (pruned or heavily
regularised layers, exported detectors) can hold many, and every product with them is slow —
worth several times in latency on such models. A denormal weight contributes at most
`1.2e-38 · |x|` to a sum, far below fp32 resolution of any normal-sized output, so zeroing it is
numerically invisible. Denormals can also arise in *activations*; for those, use the benchmark's
"denormals as zero" setting (onnxruntime's `session.set_denormal_as_zero`, which sets the CPU's
FTZ/DAZ flags).

**Never flushed:** a value that guards a singularity, e.g. the epsilon in `log(x + ε)`,
`y / (x + ε)` or `sqrt(var + ε)`: zero there makes the output infinite exactly when `x` is 0.
fp16 weights: onnxruntime's CPU kernels compute them in fp32, where fp16's subnormals are
ordinary numbers, so there is no slow path to avoid, and zeroing them would change results.

**Math:** `w' = 0 if |w| < 2⁻¹²⁶ else w` (fp32).
"""

    def transform(self, model: ir.Model) -> Outcome:
        """Rule 4: the flush changes initializers, not nodes, so the Change is made here."""
        flushed, reason = flush_model(model)
        logger.info("denormal_flush: %s", reason)
        if not flushed:
            return Outcome()
        consumers: list[str] = []
        ops: list[str] = []
        for name in flushed:
            for use in model.graph.initializers[name].uses():
                if use.node.name not in consumers:
                    consumers.append(use.node.name)
                    ops.append(use.node.op_type)
        detail = reason + ": " + ", ".join(f"{k} ({v})" for k, v in list(flushed.items())[:10])
        if len(flushed) > 10:
            detail += f", ... ({len(flushed) - 10} more)"
        return Outcome(changes=(Change(ChangeKind.CHANGED, self.name, tuple(consumers), tuple(consumers),
                                       tuple(ops), tuple(ops), detail),))


def flush_model(model: ir.Model, *, rtol: float = 1e-4) -> tuple[dict[str, int], str]:
    """Rules 1-4 in place: returns (initializer -> flushed count, one-sentence reason)."""
    found = find_denormal_initializers(model)
    if not found:  # rule 2
        return {}, "no denormal weights"
    from onnx import numpy_helper

    from fusionviz.verify import verify

    total = sum(n for _, n in found.values())
    original = ir.serde.serialize_model(model)
    flushed = {name: flush_denormals(arr) for name, (arr, _) in found.items()}
    candidate = ir.serde.serialize_model(model)
    for init in candidate.graph.initializer:
        if init.name in flushed:
            init.CopyFrom(numpy_helper.from_array(flushed[init.name], init.name))
    v = verify(original, candidate, rtol=rtol)
    if not v.ok:
        return {}, f"found {total} denormal values but left them: {v.error or v.summary()}"
    for name, arr in flushed.items():
        model.graph.initializers[name].const_value = ir.tensor(arr, name=name)
    n_init = len(flushed)
    return ({name: found[name][1] for name in flushed},
            f"{total} denormal value{'s' if total != 1 else ''} set to zero in {n_init} "
            f"initializer{'s' if n_init != 1 else ''} (outputs {v.summary()})")


