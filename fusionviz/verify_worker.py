"""Child process for isolated verification: ``python -m fusionviz.verify_worker``.

Reads a pickled ``(payload, mem_mb)`` from stdin (written by our own parent process, never by a
user), caps its address space, and runs the payload with onnxruntime's optimizer off:

- ``("verify", model_a, model_b, sets, folders)``: both models on every input set
  (:func:`fusionviz.verify.run_sets_here`);
- ``("probe", model, candidates, folder)``: the first candidate feeds the model runs on
  (:func:`fusionviz.verify.probe_here`);

A model whose weights stay on disk comes as the bytes of its graph, with the folder its weights
are read from (``fusionviz.model_io`` rule 9): the weights are never pickled.
- ``("compare", model_a, model_b, feeds, items, rtol, atol, input_set)``: one chunk of a
  per-tensor comparison (:func:`fusionviz.compare.run_chunk_here`);
- ``("profile", model, feeds, runs, threads, folder, inline)``: onnxruntime's profile of the model, per
  node (:func:`fusionviz.profile.profile_here`).

Writes a pickled ``("ok", result)`` or ``("error", message)`` to stdout. A model that
allocates gigabytes kills only this process.
"""

from __future__ import annotations

import pickle
import resource
import sys


def main() -> int:
    payload, mem_mb = pickle.load(sys.stdin.buffer)
    if mem_mb:
        limit = int(mem_mb) * 1024 * 1024
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)  # never above what this process may have (raising it fails)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    from fusionviz import errors
    from fusionviz.verify import probe_here, run_sets_here

    try:
        if payload[0] == "verify":
            result = ("ok", run_sets_here(*payload[1:]))
        elif payload[0] == "compare":
            from fusionviz.compare import run_chunk_here

            result = ("ok", run_chunk_here(*payload[1:]))
        elif payload[0] == "profile":
            from fusionviz.profile import profile_here

            result = ("ok", profile_here(*payload[1:]))
        else:
            result = ("ok", probe_here(*payload[1:]))
    except errors.FusionvizError as exc:
        result = ("error", str(exc))
    except MemoryError:
        result = ("error", f"onnxruntime ran out of memory (cap {mem_mb} MB, FUSIONVIZ_VERIFY_MEM_MB)")
    sys.stdout.buffer.write(pickle.dumps(result))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
