"""Child process for isolated verification: ``python -m fusionviz.verify_worker``.

Reads a pickled ``(model_a_bytes, model_b_bytes, feeds, mem_mb)`` from stdin (written by our
own parent process, never by a user), caps its address space, runs both models with
onnxruntime's optimizer off and writes a pickled ``("ok", outs_a, outs_b)`` or
``("error", message)`` to stdout. A model that allocates gigabytes kills only this process.
"""

from __future__ import annotations

import pickle
import resource
import sys


def main() -> int:
    a, b, feeds, mem_mb = pickle.load(sys.stdin.buffer)
    if mem_mb:
        limit = int(mem_mb) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    from fusionviz import errors
    from fusionviz.verify import make_session, run_model

    try:
        outs_a = run_model(make_session(a), feeds)
        outs_b = run_model(make_session(b), feeds)
        payload = ("ok", outs_a, outs_b)
    except errors.FusionvizError as exc:
        payload = ("error", str(exc))
    except MemoryError:
        payload = ("error", f"verification ran out of memory (cap {mem_mb} MB)")
    sys.stdout.buffer.write(pickle.dumps(payload))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
