"""Big models: fusionviz's memory and time on today's transformers, beside the other optimizers.

Models (made once, cached under ``~/.cache/fusionviz/big/<name>/``, random weights, nothing
downloaded):

=============  =======================================================  ==========================
name           what                                                     needs
=============  =======================================================  ==========================
gpt2           transformers ``GPT2Config()`` (124 M params), one file   torch + transformers
vit            transformers ``ViTConfig()`` (ViT-base, 86 M), one file  torch + transformers
gpt2_medium    GPT-2-medium config (355 M), one file                    torch + transformers
qwen2          a Qwen2-style decoder (~630 M: hidden 896, 24 layers,    torch + transformers
               GQA 14/2 heads, untied 151,936-token head), > 2 GB of
               external data
synthetic      MatMul+Add+Relu layers of 4096×4096 float32 weights,     numpy only
               > 2 GB of external data, written to disk streaming
=============  =======================================================  ==========================

The torch models are exported with torch's dynamo exporter (``torch.onnx.export(...,
dynamo=True)``), one at a time, each in its own process (an export of the 630 M model needs
several GB). torch and transformers are dev-only tools, never a dependency of fusionviz::

    .venv/bin/pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
    .venv/bin/pip install transformers

Without them those models are skipped (said once) and the synthetic model still runs.

Per model, each command in its own process, interleaved (a fusionviz command, then another
tool, ...): fusionviz ``info``, onnxslim, fusionviz ``optimize --all`` (with verification),
onnxsim (when installed), fusionviz ``optimize --all --no-verify``, onnxscript's optimizer
(``onnxscript.optimizer.optimize`` on an onnx-ir model), fusionviz ``render --collapse`` (SVG)
and onnxruntime's offline optimizer (``SessionOptions.optimized_model_filepath`` at level all;
external data for a > 2 GB model). Each row: exit code, wall time, peak RSS of the process tree,
node count before -> after and, for every command that writes a model, a check of the written
file in a separate process (not measured): ``valid`` (``onnx.checker`` on the path), ``equal``
(both models run in onnxruntime, optimizations off, one after the other, on fusionviz's input
sets, judged by ``fusionviz.verify.judge``: the same verdict ``optimize`` gives) and ``reopen``
(``python -m fusionviz info`` on it with default settings exits 0).

Peak RSS: the process tree (the command and every process it starts) is polled with psutil every
20 ms and the RSS of its processes summed; the figure is the larger of that peak and the
largest single process's maximum RSS as GNU ``/usr/bin/time -f %M`` reports it for the command it
runs (catches a spike between two polls; without /usr/bin/time, the polling alone). Summed
RSS counts a page shared by two processes (a memory-mapped weight file) twice. A tree that passes
``--max-rss-gb`` is killed (the row says so), to keep a shared machine alive.

Goals (GB = 2**30 bytes; B = the model's bytes on disk, external data included):

* ``optimize`` (verified): peak RSS ≤ 2·B + 1 GB;
* ``info`` and ``render``: ≤ 0.5·B + 0.5 GB when the weights are external data, ≤ 1.2·B + 0.5 GB
  for a one-file model;
* ``optimize --no-verify`` no slower than onnxslim on the same model; ``info`` ≤ 5 s;
* every fusionviz command exits 0; a written model is valid, equal and reopens;
* with ``--app`` (Playwright and Debian's chromium, as the browser tests): the app on a fresh
  server opens the model by its path (``FUSIONVIZ_OPEN_PATHS`` = its folder) and draws the Graph
  page: first graph ≤ 5 s after the model is loaded, server process tree ≤ 2·B + 1 GB (psutil
  polling from Open until the page is idle after the last toggle); then on the Passes page one pass
  (``--toggle``; per model ``TOGGLE_PASS``: the first candidate whose switching off changes the
  drawing) is switched off and on again: back on, the result computed before is drawn ≤ 2 s after
  the click.

Usage::

    .venv/bin/python benchmarks/bench_big.py [--models gpt2,synthetic] [--json OUT.json]
        [--make-only] [--max-rss-gb 16] [--timeout 1800] [--at COMMIT] [--app [--toggle PASS]]

``--at COMMIT`` measures a clean copy of that commit (``git archive``, under the cache) instead of
the working tree, which others may be changing while the benchmark runs. The header names the
commit measured and says when the tree had uncommitted changes under ``fusionviz/``.

Prints one line per command as it finishes, then the table and the goals.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CACHE = Path(os.environ.get("FUSIONVIZ_BIG_DIR", "") or Path.home() / ".cache" / "fusionviz" / "big")
GB = 2**30
POLL_S = 0.02
GNU_TIME = "/usr/bin/time" if Path("/usr/bin/time").exists() else None
SYNTHETIC_BYTES = int(2.25 * GB)  # over protobuf's 2 GB with room to spare
SYNTHETIC_DIM = 4096

MODELS = ("gpt2", "vit", "gpt2_medium", "qwen2", "synthetic")
TORCH_MODELS = ("gpt2", "vit", "gpt2_medium", "qwen2")
EXTERNAL = {"qwen2", "synthetic"}  # written with external data

# (tool, label) in the interleaved order: a fusionviz command, then another tool, ...
COMMANDS = (
    ("fv_info", "fusionviz info"),
    ("onnxslim", "onnxslim"),
    ("fv_optimize", "fusionviz optimize --all"),
    ("onnxsim", "onnxsim"),
    ("fv_optimize_nv", "fusionviz optimize --all --no-verify"),
    ("onnxscript", "onnxscript optimizer"),
    ("fv_render", "fusionviz render --collapse"),
    ("ort", "onnxruntime offline (level all)"),
)
COMMANDS_APP = (
    ("app_load", "app: open by path (server)"),
    ("app_graph", "app: first graph after load"),
    ("app_toggle_off", "app: toggle a pass off (new result)"),
    ("app_toggle_on", "app: toggle it back on (computed before)"),
)
#: The passes the app's toggle test tries, per model, in order: the first whose switching off changes
#: the graph the app draws (with the input shapes its Model page fixes) is switched on again and
#: timed; one that changes nothing there is switched back and the next tried. GPT-2's fused
#: attention makes ~300 MB of new weights on GPT-2-medium: the case where the cache must keep both
#: results. Whether the Qwen2-style decoder's attention fuses at those shapes has changed between
#: commits; where it does not, its scaled MatMuls are fused instead.
TOGGLE_PASS = {"gpt2": ("fuse_attention",), "gpt2_medium": ("fuse_attention",),
               "qwen2": ("fuse_attention", "fuse_matmul_transpose")}
#: The longest a toggle may take to change the drawn graph before the next candidate is tried (the
#: last one's failure is the row's).
TOGGLE_MAX_WAIT_S = 90.0
WRITES_MODEL = {"onnxslim", "fv_optimize", "onnxsim", "fv_optimize_nv", "onnxscript", "ort"}
FUSIONVIZ = {"fv_info", "fv_optimize", "fv_optimize_nv", "fv_render"}


# --------------------------------------------------------------------------- models


def model_path(name: str, cache: Path = CACHE) -> Path:
    """Where model ``name`` lives in the cache."""
    return cache / name / f"{name}.onnx"


def model_bytes(path: Path) -> int:
    """Bytes of a model on disk: the .onnx file and every file beside it (its external data)."""
    return sum(p.stat().st_size for p in path.parent.iterdir() if p.is_file())


def has_torch() -> bool:
    """torch and transformers importable (checked without importing them)."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))


def write_synthetic(path: Path, total_bytes: int = SYNTHETIC_BYTES, dim: int = SYNTHETIC_DIM,
                    seed: int = 0) -> Path:
    """A chain of ``MatMul(x, W_i) -> Add(b_i) -> Relu`` with float32 weights of ``dim × dim``
    whose sum is at least ``total_bytes``, all in one external data file ``<path>.data``.

    The weights are written one at a time (peak memory: one weight), seeded, scaled so that the
    activations keep their size through the layers. Input ``x`` is ``[batch, seq, dim]`` with
    both dims free. Returns ``path``.
    """
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data_name = path.name + ".data"
    per = dim * dim * 4
    layers = max(1, math.ceil(total_bytes / per))
    rng = np.random.default_rng(seed)
    inits, nodes = [], []
    prev = "x"
    offset = 0
    tmp_data = path.with_name(data_name + ".part")
    with open(tmp_data, "wb") as f:
        for i in range(layers):
            for tname, shape, scale in ((f"w{i}", (dim, dim), math.sqrt(2.0 / dim)), (f"b{i}", (dim,), 0.01)):
                arr = (rng.standard_normal(shape, dtype=np.float32) * np.float32(scale))
                raw = arr.tobytes()
                f.write(raw)
                t = TensorProto(name=tname, data_type=TensorProto.FLOAT, dims=list(shape),
                                data_location=TensorProto.EXTERNAL)
                for k, v in (("location", data_name), ("offset", str(offset)), ("length", str(len(raw)))):
                    e = t.external_data.add()
                    e.key, e.value = k, v
                offset += len(raw)
                pad = (-offset) % 4096  # page-aligned starts: the weights can be memory-mapped
                f.write(b"\0" * pad)
                offset += pad
                inits.append(t)
                del arr, raw
            nodes += [
                helper.make_node("MatMul", [prev, f"w{i}"], [f"mm{i}"], name=f"layer{i}/MatMul"),
                helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"add{i}"], name=f"layer{i}/Add"),
                helper.make_node("Relu", [f"add{i}"], [f"h{i}"], name=f"layer{i}/Relu"),
            ]
            prev = f"h{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="out/Identity"))
    graph = helper.make_graph(
        nodes, "synthetic_big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", dim])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", dim])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="fusionviz bench_big")
    model.ir_version = 8
    os.replace(tmp_data, path.with_name(data_name))
    onnx.save(model, path)  # the graph only: every initializer is already external
    return path


_EXPORT = r'''
import sys, time, torch, transformers
name, out = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
if name == "vit":
    m = transformers.ViTModel(transformers.ViTConfig()).eval()
    args = (torch.randn(1, 3, 224, 224),)
    kw = dict(input_names=["pixel_values"], output_names=["last_hidden_state", "pooler_output"])
else:
    if name == "gpt2":
        cfg = transformers.GPT2Config()
        cls = transformers.GPT2LMHeadModel
    elif name == "gpt2_medium":
        cfg = transformers.GPT2Config(n_embd=1024, n_layer=24, n_head=16)
        cls = transformers.GPT2LMHeadModel
    else:
        cfg = transformers.Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                                       num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                                       max_position_embeddings=4096, tie_word_embeddings=False)
        cls = transformers.Qwen2ForCausalLM
    cfg.use_cache = False
    m = cls(cfg).eval()
    args = (torch.randint(0, cfg.vocab_size, (1, 32)),)
    kw = dict(input_names=["input_ids"], output_names=["logits"],
              dynamic_shapes=({1: torch.export.Dim("seq", max=1024)},))
print(f"{name}: {sum(p.numel() for p in m.parameters()) / 1e6:.0f} M parameters", flush=True)
t = time.time()
with torch.no_grad():
    torch.onnx.export(m, args, out, dynamo=True, external_data=sys.argv[3] == "1", **kw)
print(f"{name}: exported in {time.time() - t:.0f} s", flush=True)
'''


def make_model(name: str, cache: Path = CACHE) -> Path | None:
    """The cached model ``name``, made when missing; None when it needs torch and torch is absent."""
    path = model_path(name, cache)
    if path.exists() and (path.parent / ".done").exists():
        return path
    if path.parent.exists():
        shutil.rmtree(path.parent)  # a half-made model (an interrupted export)
    if name == "synthetic":
        write_synthetic(path)
    elif name in TORCH_MODELS:
        if not has_torch():
            return None
        path.parent.mkdir(parents=True)
        print(f"exporting {name} (torch dynamo, one process) ...", flush=True)
        subprocess.run([sys.executable, "-c", _EXPORT, name, str(path), "1" if name in EXTERNAL else "0"],
                       check=True, cwd=path.parent)
    else:
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")
    (path.parent / ".done").write_text("")
    return path


# --------------------------------------------------------------------------- running one command


def command(tool: str, model: Path, out_dir: Path, *, external: bool) -> tuple[list[str], Path | None]:
    """The argv that runs ``tool`` on ``model`` and the model file it writes (None: none)."""
    py = sys.executable
    me = str(Path(__file__).resolve())
    out = out_dir / f"{tool}.onnx"
    ext = ["--save-as-external-data"] if external else []
    if tool == "fv_info":
        return [py, "-m", "fusionviz", "info", str(model)], None
    if tool == "fv_optimize":
        return [py, "-m", "fusionviz", "optimize", str(model), "--all", "-o", str(out)], out
    if tool == "fv_optimize_nv":
        return [py, "-m", "fusionviz", "optimize", str(model), "--all", "--no-verify", "-o", str(out)], out
    if tool == "fv_render":
        return [py, "-m", "fusionviz", "render", str(model), "--collapse", "-o", str(out_dir / "render.svg")], None
    if tool == "onnxslim":
        return [str(Path(py).with_name("onnxslim")), str(model), str(out), *ext], out
    if tool == "onnxsim":
        return [str(Path(py).with_name("onnxsim")), str(model), str(out), *ext], out
    if tool in ("onnxscript", "ort"):
        return [py, me, "--tool", tool, str(model), str(out)] + (["--external"] if external else []), out
    raise ValueError(f"unknown tool {tool!r}")


def tool_available(tool: str) -> bool:
    """Whether ``tool`` can run here (onnxsim and onnxslim are optional)."""
    if tool in ("onnxslim", "onnxsim"):
        return Path(sys.executable).with_name(tool).exists()
    return True


def run_tool(tool: str, src: str, out: str, external: bool) -> None:
    """Body of ``--tool``: onnxscript's optimizer or onnxruntime's offline optimizer, in this process."""
    if tool == "onnxscript":
        import onnx_ir as ir
        import onnxscript.optimizer

        model = ir.load(src)
        onnxscript.optimizer.optimize(model)
        if external:
            ir.save(model, out, external_data=Path(out).name + ".data")
        else:
            ir.save(model, out)
    elif tool == "ort":
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.optimized_model_filepath = out
        if external:
            so.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                        Path(out).name + ".data")
            so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
        ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    else:
        raise ValueError(f"unknown tool {tool!r}")


@dataclasses.dataclass
class Measured:
    """One process tree's run: exit code (None: killed), wall seconds, peak RSS bytes, stderr tail."""

    rc: int | None
    wall_s: float
    peak_rss: int
    err: str = ""
    killed: str = ""


def _follow(proc: subprocess.Popen, root, *, max_rss: int, timeout_s: float, t0: float) -> tuple[int, int, str]:
    """Poll ``proc``'s tree until it exits: (peak summed RSS, wait status, why it was killed or "")."""
    import psutil

    peak = 0
    killed = ""
    while True:
        pid, status = os.waitpid(proc.pid, os.WNOHANG)
        if pid:
            return peak, status, killed
        total = 0
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            tree = []
        for p in tree:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        peak = max(peak, total)
        if not killed and total > max_rss:
            killed = f"killed: process tree over {max_rss / GB:.1f} GB (--max-rss-gb)"
        elif not killed and time.perf_counter() - t0 > timeout_s:
            killed = f"killed: over {timeout_s:.0f} s (--timeout)"
        if killed:
            try:
                os.killpg(proc.pid, 9)
            except ProcessLookupError:
                pass
        time.sleep(POLL_S)


def measure(argv: Sequence[str], *, max_rss: int, timeout_s: float, env: dict | None = None) -> Measured:
    """Run ``argv`` and follow its process tree (psutil polling + ``/usr/bin/time -f %M``).

    The command runs under GNU time, not straight from this process: a child's ``ru_maxrss``
    starts from its parent's RSS at the fork, and this process may hold a few hundred MB.
    """
    import psutil

    err_file = tempfile.TemporaryFile()
    max_file = tempfile.NamedTemporaryFile(suffix=".maxrss", delete=False)
    max_file.close()
    wrapped = ([GNU_TIME, "-f", "%M", "-o", max_file.name, *argv] if GNU_TIME else list(argv))
    t0 = time.perf_counter()
    proc = subprocess.Popen(wrapped, stdout=subprocess.DEVNULL, stderr=err_file, cwd=ROOT,
                            env={**os.environ, **(env or {})}, start_new_session=True)
    root = psutil.Process(proc.pid)
    try:
        peak, status, killed = _follow(proc, root, max_rss=max_rss, timeout_s=timeout_s, t0=t0)
    except BaseException:  # interrupted (Ctrl-C, SIGTERM): take the command's tree down too
        os.killpg(proc.pid, 9)
        raise
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    try:  # what is left of the group (a grandchild that outlived its parent)
        os.killpg(proc.pid, 9)
    except (ProcessLookupError, PermissionError):
        pass
    try:  # the largest single process of the tree (GNU time's wait4 of the command)
        lines = Path(max_file.name).read_text().split()
        peak = max(peak, int(lines[-1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    os.unlink(max_file.name)
    err_file.seek(0)
    tail = err_file.read()[-4000:].decode("utf-8", "replace").strip()
    err_file.close()
    last = tail.splitlines()[-1] if tail else ""
    return Measured(None if killed else proc.returncode, wall, peak, last[:300], killed)


# --------------------------------------------------------------------------- checking a written model


def check_written(original: str, written: str) -> dict:
    """Body of ``--check``: is ``written`` valid, equal to ``original`` and reopened by fusionviz?

    Runs the two models one after the other (one session alive at a time), optimizations off,
    on fusionviz's input sets for the original, and judges each set with ``fusionviz.verify.judge``
    with optimize's noise floor (onnxruntime's own level-all run of the original).
    """
    import numpy as np
    import onnx
    import onnxruntime as ort

    from fusionviz import model_io, verify
    from fusionviz.inputs import InputSpec, plan_inputs

    out: dict = {"valid": None, "equal": None, "reopen": None, "nodes_after": None, "why": ""}
    try:
        onnx.checker.check_model(written)
        out["valid"] = True
    except Exception as exc:  # noqa: BLE001 - reported, the benchmark goes on
        out["valid"] = False
        out["why"] = f"checker: {str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}"
    graph = onnx.load(written, load_external_data=False)
    out["nodes_after"] = model_io.count_nodes(graph)
    del graph
    defaults = {k: v for k, v in os.environ.items() if not k.startswith("FUSIONVIZ_")}  # default settings
    r = subprocess.run([sys.executable, "-m", "fusionviz", "info", written], capture_output=True, text=True,
                       cwd=ROOT, env=defaults)
    out["reopen"] = r.returncode == 0
    if r.returncode:
        out["why"] = out["why"] or f"info exit {r.returncode}: {r.stderr.strip()[-200:]}"
    try:
        plan = plan_inputs(onnx.load(original, load_external_data=False), InputSpec())
        sets = plan.input_sets()

        def run_all(path: str, level: str = "off") -> list:
            so = ort.SessionOptions()
            so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if level == "all"
                                           else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
            sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            names = [o.name for o in sess.get_outputs()]
            res = []
            for _, feeds in sets:
                try:
                    res.append(dict(zip(names, sess.run(None, dict(feeds)), strict=True)))
                except Exception as exc:  # noqa: BLE001 - this set does not run
                    res.append(str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
            return res

        def first_failure(ref: list, got: list, noise: list) -> str | None:
            for (label, _), a, b, nz in zip(sets, ref, got, noise, strict=True):
                if isinstance(a, str):
                    continue
                if isinstance(b, str):
                    return f"{label}: written model fails: {b}"
                diffs, missing = verify.judge(a, b, input_set=label, noise=nz)
                if missing:
                    return missing
                bad = next((d for d in diffs if not d.ok), None)
                if bad is not None:
                    return f"{label}: {bad.name} differs (max abs {float(np.float64(bad.max_abs_diff)):.3g})"
            return None

        # one session alive at a time; onnxruntime's own level-all run of the original gives the
        # noise floor, as in optimize's verification (only needed when the plain judgement fails)
        ref = run_all(original)
        got = run_all(written)
        why = first_failure(ref, got, [None] * len(sets))
        if why is not None:
            other = run_all(original, "all")
            noise = [verify.reference_noise(a, b) if isinstance(a, dict) and isinstance(b, dict) else None
                     for a, b in zip(ref, other, strict=True)]
            why = first_failure(ref, got, noise)
        equal = why is None
        if why:
            out["why"] = out["why"] or why
        out["equal"] = equal
    except Exception as exc:  # noqa: BLE001 - reported, the benchmark goes on
        out["equal"] = False
        out["why"] = out["why"] or f"compare: {str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}"
    return out


def nodes_of(path: Path) -> int:
    """Node count of a model file (subgraphs included), read without its weights."""
    import onnx

    from fusionviz import model_io

    return model_io.count_nodes(onnx.load(str(path), load_external_data=False))


# --------------------------------------------------------------------------- table and goals


def goal_limits(model_size: int, external: bool) -> dict[str, int]:
    """Peak RSS ceilings (bytes) per fusionviz command for a model of ``model_size`` bytes (the app's
    server: as optimize)."""
    light = 0.5 if external else 1.2
    return {
        "fv_optimize": int(2 * model_size + 1 * GB),
        "app_graph": int(2 * model_size + 1 * GB),
        "fv_info": int(light * model_size + 0.5 * GB),
        "fv_render": int(light * model_size + 0.5 * GB),
    }


INFO_MAX_S = 5.0


def judge_goals(rows: Sequence[dict], model_size: int, external: bool) -> dict[str, bool | None]:
    """Goal -> met (True), missed (False) or not measurable (None: a command or onnxslim did not run).

    ``rows`` are one model's rows (``tool``, ``rc``, ``wall_s``, ``peak_rss`` and for model writers
    ``valid``/``equal``/``reopen``).
    """
    by = {r["tool"]: r for r in rows}
    limits = goal_limits(model_size, external)
    goals: dict[str, bool | None] = {}

    def ran(tool: str) -> dict | None:
        return by.get(tool)

    for tool, key in (("fv_optimize", "rss optimize"), ("fv_info", "rss info"), ("fv_render", "rss render")):
        r = ran(tool)
        goals[key] = None if r is None else (r["rc"] == 0 and r["peak_rss"] <= limits[tool])
    info = ran("fv_info")
    goals["info time"] = None if info is None else (info["rc"] == 0 and info["wall_s"] <= INFO_MAX_S)
    nv, slim = ran("fv_optimize_nv"), ran("onnxslim")
    if nv is None:
        goals["no-verify vs onnxslim"] = None
    elif nv["rc"] != 0:
        goals["no-verify vs onnxslim"] = False
    elif slim is None or slim["rc"] != 0:
        goals["no-verify vs onnxslim"] = None
    else:
        goals["no-verify vs onnxslim"] = nv["wall_s"] <= slim["wall_s"]
    fv = [ran(t) for t in FUSIONVIZ if ran(t) is not None]
    goals["exit 0"] = None if not fv else all(r["rc"] == 0 for r in fv)
    written = [ran(t) for t in ("fv_optimize", "fv_optimize_nv") if ran(t) is not None]
    if not written:
        goals["output valid+equal+reopens"] = None
    else:
        goals["output valid+equal+reopens"] = all(
            r["rc"] == 0 and r.get("valid") is True and r.get("equal") is True and r.get("reopen") is True
            for r in written)
    graph = ran("app_graph")
    goals["app first graph"] = None if graph is None else (graph["rc"] == 0 and graph["wall_s"] <= APP_GRAPH_MAX_S)
    again = ran("app_toggle_on")
    goals["app toggle again"] = None if again is None else (again["rc"] == 0 and again["wall_s"] <= APP_TOGGLE_MAX_S)
    app_rows = [r for r in (graph, ran("app_toggle_off"), again) if r is not None]
    goals["app memory"] = None if graph is None else (
        graph["rc"] == 0 and all(r["peak_rss"] <= limits["fv_optimize"] for r in app_rows))
    return goals


def _mark(v: bool | None) -> str:
    return "n/a" if v is None else ("yes" if v else "NO")


def _gb(n: int | None) -> str:
    return "-" if n is None else f"{n / GB:.2f}"


def table_rows(rows: Iterable[dict]) -> list[list[str]]:
    """The printed table's cells: one list per measured command."""
    label = dict(COMMANDS + COMMANDS_APP)
    out = []
    for r in rows:
        status = "ok" if r["rc"] == 0 else (r.get("killed") or f"exit {r['rc']}")
        after = r.get("nodes_after")
        nodes = f"{r['nodes_before']:,}" + (f" -> {after:,}" if after is not None else "")
        size = r.get("bytes")
        ceiling = goal_limits(size, bool(r.get("external"))).get(r["tool"]) if size else None
        out.append([r["model"], label.get(r["tool"], r["tool"]), status, f"{r['wall_s']:.1f}", _gb(r["peak_rss"]),
                    f"{r['peak_rss'] / size:.1f}x" if size else "-", _gb(ceiling) if ceiling else "", nodes, _mark(r.get("valid")) if r["tool"] in WRITES_MODEL else "",
                    _mark(r.get("equal")) if r["tool"] in WRITES_MODEL else "",
                    _mark(r.get("reopen")) if r["tool"] in WRITES_MODEL else "",
                    (r.get("err") or r.get("why") or "")[:90] if (r["rc"] != 0 or r.get("why")) else ""])
    return out


HEADER = ["model", "command", "status", "wall s", "peak GB", "x size", "goal GB", "nodes", "valid", "equal", "reopen",
          "note"]


def format_table(cells: Sequence[Sequence[str]], header: Sequence[str] = HEADER) -> str:
    """Markdown table (pipes), columns padded."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *cells, strict=False)]
    lines = ["| " + " | ".join(str(h).ljust(w) for h, w in zip(header, widths, strict=True)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) + " |" for row in cells]
    return "\n".join(lines)


def goals_table(per_model: dict[str, dict]) -> str:
    """One row per model: size, kind, and each goal's mark."""
    names = list(next(iter(per_model.values()))["goals"]) if per_model else []
    cells = [[m, f"{v['bytes'] / GB:.2f} GB", "external" if v["external"] else "one file",
              *(_mark(v["goals"][g]) for g in names)] for m, v in per_model.items()]
    return format_table(cells, ["model", "size", "weights", *names])


# --------------------------------------------------------------------------- main


def _parse_models(text: str) -> list[str]:
    names = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in names if m not in MODELS]
    if bad:
        raise SystemExit(f"bench_big: unknown model {', '.join(bad)}; choose from {', '.join(MODELS)}")
    return names


APP_GRAPH_MAX_S = 5.0
APP_TOGGLE_MAX_S = 2.0
APP_PATH_LABEL = "Path of an .onnx file, a .zip or a model folder on the server"


def app_available() -> str | None:
    """Why the app cannot be measured here (None: it can)."""
    import importlib.util

    sys.path.insert(0, str(ROOT / "tests" / "e2e"))
    from conftest import CHROMIUM

    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is not installed"
    if not Path(CHROMIUM).exists():
        return f"no chromium at {CHROMIUM}"
    return None


def toggle_for(name: str, given: str | None) -> tuple[str, ...]:
    """The passes the toggle test tries on ``name``, in order (``given``: --toggle, comma-separated;
    '' means none)."""
    if given is not None:
        return tuple(p.strip() for p in given.split(",") if p.strip())
    return TOGGLE_PASS.get(name, ())


def graph_text(page) -> list[str]:
    """The text of every drawn graph node, labels included (a collapsed block's label names its
    ops and counts, so a pass toggled inside a block changes it even when no title does)."""
    sys.path.insert(0, str(ROOT / "tests" / "e2e"))
    from conftest import drawn_nodes

    return drawn_nodes(page)


def _wait_graph_change(page, drawn: list[str], timeout_s: float, since: float | None = None) -> float:
    """Seconds from ``since`` (default: now) until the page draws graph nodes whose text differs
    from ``drawn`` (:func:`graph_text`; at least two nodes); polled every 50 ms."""
    t0 = time.perf_counter() if since is None else since
    while True:
        nodes = graph_text(page)
        if len(nodes) >= 2 and nodes != drawn:
            return time.perf_counter() - t0
        if time.perf_counter() - t0 > timeout_s:
            raise TimeoutError(f"the drawn graph did not change within {timeout_s:.0f} s")
        time.sleep(0.05)


def measure_app(name: str, path: Path, *, timeout_s: float, toggle: Sequence[str] = ()) -> list[dict]:
    """The app on a fresh server, in Chromium: open ``path`` by its path on the Model page, then the
    Graph page, then the Passes page, where ``toggle`` is switched off and on again. Rows:
    ``app_load`` (Open to the model's summary, server tree RSS then), ``app_graph`` (the Graph
    page's click to its first drawn nodes, the server tree's peak RSS from Open until the page is
    idle), ``app_toggle_off`` (the toggle's click until the drawn graph changed: a selection not
    computed before) and ``app_toggle_on`` (the same, back to the selection computed before); each
    toggle waits for the page to be idle before the next step, and its peak RSS is the tree's peak
    from Open until then. Prefetch is off: the first toggle is computed when it is clicked."""
    import threading

    import psutil
    from playwright.sync_api import sync_playwright

    sys.path.insert(0, str(ROOT / "tests" / "e2e"))
    from conftest import (
        CHROMIUM,
        CHROMIUM_ARGS,
        free_port,
        nav,
        start_server,
        stop_server,
        wait_idle,
    )
    from test_browser import graph_nodes

    port = free_port()
    log_path = CACHE / f"app-{name}.log"
    proc = start_server(port, "--sample", "textbook", log_path=log_path,
                        env={"FUSIONVIZ_OPEN_PATHS": str(path.parent), "FUSIONVIZ_PREFETCH": "0"})
    server = psutil.Process(proc.pid)
    peak = [0]
    stop = threading.Event()

    def tree_rss() -> int:
        total = 0
        try:
            procs = [server, *server.children(recursive=True)]
        except psutil.Error:
            return 0
        for q in procs:
            try:
                total += q.memory_info().rss
            except psutil.Error:
                pass
        return total

    def poll() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], tree_rss())
            time.sleep(POLL_S)

    base = {"model": name, "nodes_before": None, "nodes_after": None, "err": "", "killed": "",
            "bytes": model_bytes(path), "external": name in EXTERNAL}
    rows: list[dict] = []
    pw = sync_playwright().start()
    browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
    try:
        page = browser.new_context(viewport={"width": 1600, "height": 1000}).new_page()
        page.set_default_timeout(timeout_s * 1000)
        page.goto(f"http://127.0.0.1:{port}/model")
        wait_idle(page, timeout_s)
        page.get_by_role("textbox", name=APP_PATH_LABEL).fill(path.name)
        threading.Thread(target=poll, daemon=True).start()
        t0 = time.perf_counter()
        page.locator('[data-testid="stForm"]').get_by_role("button", name="Open").click()
        page.get_by_text(f"Summary: {path.name}").wait_for(timeout=timeout_s * 1000)
        wait_idle(page, timeout_s)
        rows.append({**base, "tool": "app_load", "rc": 0, "wall_s": round(time.perf_counter() - t0, 2),
                     "peak_rss": tree_rss()})
        page.get_by_role("button", name="See the graph before / after →").click()
        t1 = time.perf_counter()
        while len(graph_nodes(page)) < 2:
            if time.perf_counter() - t1 > timeout_s:
                raise TimeoutError(f"no graph drawn within {timeout_s:.0f} s")
            time.sleep(0.1)
        first = time.perf_counter() - t1
        wait_idle(page, timeout_s)
        rows.append({**base, "tool": "app_graph", "rc": 0, "wall_s": round(first, 2), "peak_rss": peak[0]})
        if toggle:
            from fusionviz.passes import get_pass

            nav(page, "Passes")
            _wait_graph_change(page, [], timeout_s)
            wait_idle(page, timeout_s)
            for k, name_ in enumerate(toggle):
                title = get_pass(name_).title
                drawn = graph_text(page)
                t2 = time.perf_counter()
                page.get_by_text(title, exact=True).click()
                try:
                    changed = _wait_graph_change(page, drawn, min(timeout_s, TOGGLE_MAX_WAIT_S), since=t2)
                except TimeoutError:
                    if k == len(toggle) - 1:
                        raise
                    page.get_by_text(title, exact=True).click()  # changed nothing drawn: back on, next one
                    wait_idle(page, timeout_s)
                    continue
                wait_idle(page, timeout_s)
                rows.append({**base, "tool": "app_toggle_off", "rc": 0, "wall_s": round(changed, 2),
                             "peak_rss": peak[0], "idle_s": round(time.perf_counter() - t2, 2), "pass": name_})
                drawn = graph_text(page)
                t2 = time.perf_counter()
                page.get_by_text(title, exact=True).click()
                changed = _wait_graph_change(page, drawn, min(timeout_s, TOGGLE_MAX_WAIT_S), since=t2)
                wait_idle(page, timeout_s)
                rows.append({**base, "tool": "app_toggle_on", "rc": 0, "wall_s": round(changed, 2),
                             "peak_rss": peak[0], "idle_s": round(time.perf_counter() - t2, 2), "pass": name_})
                break
        stop.set()
    except Exception as exc:  # noqa: BLE001 - a row that says what failed
        stop.set()
        done = {r["tool"] for r in rows}
        tool = next((t for t, _ in COMMANDS_APP if t not in done), "app_toggle_on")
        rows.append({**base, "tool": tool, "rc": 1, "wall_s": 0.0,
                     "peak_rss": peak[0], "err": (str(exc).splitlines() or [type(exc).__name__])[0][:200]})
    finally:
        stop.set()
        browser.close()
        pw.stop()
        stop_server(proc)
    return rows


def bench_model(name: str, path: Path, *, max_rss: int, timeout_s: float, log: Callable[[str], None],
                app: bool = False, tools: Sequence[str] | None = None, toggle: Sequence[str] = ()) -> dict:
    """Every command on one model, in the interleaved order; returns its rows and goals."""
    size = model_bytes(path)
    external = name in EXTERNAL
    before = nodes_of(path)
    rows = []
    for tool, label in COMMANDS:
        if tools is not None and tool not in tools:
            continue
        if not tool_available(tool):
            log(f"  {label}: not installed, skipped")
            continue
        out_dir = Path(tempfile.mkdtemp(prefix=f"{name}_{tool}_", dir=CACHE))
        try:
            argv, written = command(tool, path, out_dir, external=external)
            m = measure(argv, max_rss=max_rss, timeout_s=timeout_s)
            row = {"model": name, "tool": tool, "rc": m.rc, "wall_s": round(m.wall_s, 2), "peak_rss": m.peak_rss,
                   "err": m.err, "killed": m.killed, "nodes_before": before, "nodes_after": None,
                   "bytes": size, "external": external}
            if written is not None and m.rc == 0 and written.exists():
                r = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--check", str(path),
                                    str(written)], capture_output=True, text=True, cwd=ROOT)
                try:
                    row.update(json.loads(r.stdout.strip().splitlines()[-1]))
                except (json.JSONDecodeError, IndexError):
                    row.update(valid=False, equal=False, reopen=False,
                               why=f"check crashed: {r.stderr.strip()[-200:]}")
            elif written is not None:
                row.update(valid=None, equal=None, reopen=None)
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)
        rows.append(row)
        log(f"  {label}: {'ok' if m.rc == 0 else m.killed or f'exit {m.rc}'}  {m.wall_s:.1f} s  "
            f"{m.peak_rss / GB:.2f} GB" + (f"  {m.err}" if m.rc != 0 and m.err else "")
            + (f"  [{row.get('why')}]" if row.get("why") else ""))
    if app:
        for row in measure_app(name, path, timeout_s=min(timeout_s, 600), toggle=toggle):
            row["nodes_before"] = before
            rows.append(row)
            log(f"  {dict(COMMANDS_APP)[row['tool']]}: {'ok' if row['rc'] == 0 else row['err']}  "
                f"{row['wall_s']:.1f} s  {row['peak_rss'] / GB:.2f} GB"
                + (f"  ({row['pass']}; page idle after {row['idle_s']:.1f} s)" if "idle_s" in row else ""))
    return {"bytes": size, "external": external, "nodes": before, "rows": rows,
            "goals": judge_goals(rows, size, external)}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {', '.join(MODELS)}")
    ap.add_argument("--json", metavar="OUT", help="write every row and goal as JSON")
    ap.add_argument("--make-only", action="store_true", help="make (cache) the models and stop")
    ap.add_argument("--max-rss-gb", type=float, default=16.0,
                    help="kill a command whose process tree passes this (default 16)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per command (default 1800)")
    ap.add_argument("--at", metavar="COMMIT", help="measure a clean copy of COMMIT, not the working tree")
    ap.add_argument("--tools", help="comma-separated commands to run (default all): "
                    + ", ".join(t for t, _ in COMMANDS) + "; an empty value runs none (with --app: the app only)")
    ap.add_argument("--app", action="store_true",
                    help="also open each model by path in the app (Chromium): load time, first graph, server RSS")
    ap.add_argument("--toggle", metavar="PASS", default=None,
                    help="with --app: the passes tried, in order, to switch off and on again on the Passes page "
                         "(comma-separated; default per model: "
                         + "; ".join(f"{m} {','.join(p)}" for m, p in TOGGLE_PASS.items())
                         + "; none on the others; an empty value: no toggle)")
    ap.add_argument("--check", nargs=2, metavar=("ORIGINAL", "WRITTEN"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.check:
        print(json.dumps(check_written(*args.check)))
        return 0
    if args.at:
        return _run_at(args.at, list(sys.argv[1:] if argv is None else argv))
    models = _parse_models(args.models)
    CACHE.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    skipped_torch = False
    for name in models:
        p = make_model(name)
        if p is None:
            skipped_torch = True
            continue
        paths[name] = p
    if skipped_torch:
        print("torch/transformers not installed: skipping " + ", ".join(m for m in models if m in TORCH_MODELS)
              + " (see this script's docstring to install them)")
    if args.make_only:
        for n, p in paths.items():
            print(f"{n}: {p} ({model_bytes(p) / GB:.2f} GB, {nodes_of(p):,} nodes)")
        return 0
    commit = _commit_words()
    tools = None if args.tools is None else [t.strip() for t in args.tools.split(",") if t.strip()]
    bad = [t for t in tools or () if t not in dict(COMMANDS)]
    if bad:
        raise SystemExit(f"bench_big: unknown command {', '.join(bad)}; choose from "
                         + ", ".join(t for t, _ in COMMANDS))
    app = args.app
    why_not = app_available() if app else None
    if why_not:
        print(f"--app: not measured ({why_not})")
        app = False
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds: the running command is killed
    results: dict[str, dict] = {}
    for name, p in paths.items():
        print(f"{name}: {model_bytes(p) / GB:.2f} GB, {nodes_of(p):,} nodes", flush=True)
        results[name] = bench_model(name, p, max_rss=int(args.max_rss_gb * GB), timeout_s=args.timeout,
                                    log=lambda s: print(s, flush=True), app=app, tools=tools,
                                    toggle=toggle_for(name, args.toggle))
        if args.json:  # after each model: a run cut short keeps what it measured
            Path(args.json).write_text(json.dumps({"commit": commit, "models": results}, indent=1))
    rows = [r for v in results.values() for r in v["rows"]]
    print(f"\nfusionviz at {commit}; peak RSS: process tree, psutil every {POLL_S * 1000:.0f} ms"
          + (" and /usr/bin/time -f %M" if GNU_TIME else " (no /usr/bin/time)") + "; GB = 2**30 bytes\n")
    print(format_table(table_rows(rows)))
    if results:
        print("\nGoals (yes / NO / n/a):\n")
        print(goals_table(results))
    return 0


def _commit_words() -> str:
    """The commit measured, and whether ``fusionviz/`` had uncommitted changes."""
    snap = ROOT / ".bench_big_commit"
    if snap.exists():  # a clean copy made by --at
        return snap.read_text().strip() + " (clean copy)"
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=ROOT).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "fusionviz"], capture_output=True, text=True,
                           cwd=ROOT).stdout.strip()
    return head + (" + uncommitted changes in fusionviz/" if dirty else "")


def without_at(argv: Sequence[str]) -> list[str]:
    """``argv`` less ``--at X`` / ``--at=X``."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--at":
            skip = True
        elif not a.startswith("--at="):
            out.append(a)
    return out


def _run_at(rev: str, argv: Sequence[str]) -> int:
    """Extract ``rev`` into the cache and run its own bench_big.py there with the same arguments."""
    r = subprocess.run(["git", "rev-parse", "--short", rev], capture_output=True, text=True, cwd=ROOT)
    if r.returncode:
        raise SystemExit(f"bench_big: no commit {rev!r}")
    sha = r.stdout.strip()
    dest = CACHE / f"src-{sha}"
    if not (dest / ".bench_big_commit").exists():
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", sha], capture_output=True, cwd=ROOT, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        (dest / ".bench_big_commit").write_text(sha)
    script = dest / "benchmarks" / "bench_big.py"
    if not script.exists():
        raise SystemExit(f"bench_big: commit {sha} has no benchmarks/bench_big.py")
    return subprocess.run([sys.executable, str(script), *without_at(argv)]).returncode  # relative paths: ours


def _tool_main(argv: Sequence[str]) -> int:
    """``bench_big.py --tool NAME SRC OUT [--external]``: run one other optimizer in this process."""
    tool, src, out = argv[1], argv[2], argv[3]
    run_tool(tool, src, out, external="--external" in argv[4:])
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--tool":
        sys.exit(_tool_main(sys.argv[1:]))
    sys.exit(main())
