"""Fusion passes: several nodes become one (or fewer) that compute the same thing faster.

One pass per module. Rule-based passes wrap onnxscript's rewrite rules (pattern + check +
rewrite; a failed check returns a reason) where onnxscript has the rule, with the guards the
library lacks, and add their own where no library has them. The transformer fusions match
imperatively on onnx-ir (:mod:`.transformer_common`), as exported attention blocks come in too
many shapes for fixed patterns. Rules that apply to every pass here:

1. A weight is rewritten only when it is a constant no other node uses (a shared weight is
   never duplicated or changed under another node's feet).
2. An intermediate tensor that disappears must have no consumer outside the pattern and must
   not be a graph output (onnxscript's matcher checks this).
3. Nodes and initializers that the rewrite itself left without consumers are removed; unrelated
   dead code is left to the dead-node pass, so each toggle reports only its own changes.
4. New weight names come from :class:`fusionviz.passes.hygiene.Namer`, unique across every graph.
"""
