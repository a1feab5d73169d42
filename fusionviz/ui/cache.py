"""Cached backend calls, keyed by model sha256 + pass list (+ shapes and view options).

Rules:

1. Models and pipeline results hold protobufs: they are shared, never copied
   (``st.cache_resource``), and nothing downstream mutates them.
2. Small derived data (summaries, DOT, verification, memory plans) is ``st.cache_data``; SVG
   lives in the graph viewer's LRU (``graph_component.svg_for``), bounded by bytes.
3. The pipeline is cached per *prefix*: the result for passes ``[p1..pn]`` is the longest cached
   prefix ``[p1..pk]`` plus one pipeline run of ``pk+1..pn`` on its final model, and every prefix
   on the way is cached too. Because the registry fixes the order, toggling a pass re-runs only
   the passes after it, and toggling the last one runs one pass. A pass that changes nothing
   shares the previous model (no copy is held for it). Arguments whose name starts with ``_``
   are not part of the key; the model's sha256 is.
4. After the Passes page is drawn, the selections one toggle away are computed in the
   background (``prefetch_neighbours``), so a toggle on a model of up to 500 nodes is a cache hit.
   The background thread pauses for page runs only between cached calls (never while it holds a
   cache key's lock that a page may be waiting on).
5. Every cache has a bound (``max_entries``; the pipelines also by the bytes of the distinct
   models they hold, ``FUSIONVIZ_PIPELINE_CACHE_MB``); so does the table of models a link can name
   (``hold_model``: uploads and the command line's model, at most HELD_MODELS, oldest out). A
   model shared by several entries (prefixes share their snapshots) is counted once, and weights
   on disk not at all: every snapshot of the model reads them through one memory map
   (:func:`held_bytes`; counted from dims, never by serializing the weights).
6. This module knows nothing of the session: callers pass keys and values (no import of
   :mod:`fusionviz.ui.state`).
7. With weights on disk (a big model: the validity rule's checker and onnxruntime load cost
   seconds), a run's result is cached and shown before the rule is checked: the check is
   started under the page (:func:`start_checks`; the page says it is checking), waits until no
   page run is in progress and runs in a background thread. A result that breaks the rule is
   replaced (what the page's next run shows) by the run with the rule applied pass by pass (the
   culprit declined, as it would have been), every
   result computed on top of it is dropped, and the model's revision goes up (:func:`keyed_sha`:
   part of every key computed from a result, so nothing derived from the replaced one is
   reused); that model's later runs are checked before they are shown.
8. With weights on disk, the large tensors a run's passes make (a fused attention's packed
   weights) are written to a data file of the run's own and memory-mapped (``fusionviz.model_io``
   rule 10), so the snapshots share them instead of each holding a copy; the cache adopts the
   run's folder, counts its bytes once against ``FUSIONVIZ_PIPELINE_CACHE_DISK_MB`` (4096), and
   removes it when no cached result reads it any more.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import hashlib
import logging
import os
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import onnx
import streamlit as st

from fusionviz import model_io
from fusionviz.model_io import LoadedModel

logger = logging.getLogger(__name__)


@st.cache_resource(max_entries=16, show_spinner=False)
def load_sample(name: str) -> LoadedModel:
    """A shipped sample model (loaded once per server)."""
    from fusionviz import samples

    return samples.load_sample(name)


@st.cache_resource(max_entries=8, show_spinner=False)
def load_path(path: str) -> LoadedModel:
    """A model from a path given on the command line."""
    return model_io.load_path(path)


@st.cache_resource(max_entries=8, show_spinner="Reading the model...")
def load_bytes(data_sha: str, name: str, _data: bytes) -> LoadedModel:
    """An uploaded model, keyed by the hash of the upload (so a re-upload costs nothing)."""
    return model_io.load_bytes(_data, name=name)


def bytes_sha(data: bytes) -> str:
    """sha256 of raw bytes (an upload's identity)."""
    return hashlib.sha256(data).hexdigest()


HELD_MODELS = 8
REF_LEN = 20  # hex digits of the model's sha256 in a ``?model=`` link (80 bits: not guessable)
_HELD: OrderedDict[str, tuple[LoadedModel, dict]] = OrderedDict()
_HELD_LOCK = threading.Lock()


def hold_model(loaded: LoadedModel, origin: dict) -> None:
    """Rule 5: keep ``loaded`` so that a link naming it (``?model=REF``) opens it in another session."""
    with _HELD_LOCK:
        ref = loaded.sha256[:REF_LEN]
        _HELD[ref] = (loaded, dict(origin))
        _HELD.move_to_end(ref)
        while len(_HELD) > HELD_MODELS:
            _HELD.popitem(last=False)


def held_model(ref: str) -> tuple[LoadedModel, dict] | None:
    """The (model, origin) a ``?model=`` link names, or None when the server no longer holds it."""
    ref = (ref or "").strip().lower()
    if len(ref) < 12:
        return None
    with _HELD_LOCK:
        for key, value in _HELD.items():
            if key.startswith(ref) or ref.startswith(key):
                return value
    return None


class _PipelineCache:
    """Rule 3 and 5: PipelineResults per (sha, passes, shapes), least recently used out first,
    bounded by entries, by the bytes of the distinct models they hold (prefixes share their
    snapshots, so a model is counted once however many entries hold it) and by the bytes of the
    new-weight files (rule 8) those models read, each file once."""

    def __init__(self, max_entries: int, max_bytes: int, max_disk_bytes: int | None = None) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_disk_bytes = max_disk_bytes
        self._data: OrderedDict[tuple, Any] = OrderedDict()
        self._bytes: dict[int, int] = {}  # id(model) -> held_bytes, for models the entries hold
        self._reads: dict[int, frozenset[str]] = {}  # id(model) -> the adopted folders it reads
        self._folders: dict[str, int] = {}  # adopted new-weight folder -> its bytes on disk
        self._lock = threading.Lock()
        self._busy: dict[tuple, threading.Lock] = {}

    def get(self, key: tuple):
        with self._lock:
            got = self._data.get(key)
            if got is not None:
                self._data.move_to_end(key)
            return got

    def busy(self, key: tuple) -> threading.Lock:
        """A lock per key: two sessions asking for one selection at once run it once."""
        with self._lock:
            return self._busy.setdefault(key, threading.Lock())

    def put(self, key: tuple, result) -> None:
        sizes = {id(s.model): s.model for s in result.snapshots}
        with self._lock:
            new = [m for k, m in sizes.items() if k not in self._bytes]
        measured = {id(m): held_bytes(m) for m in new}  # outside the lock: a few ms per model
        reads = {id(m): weight_folders(m) for m in new}
        with self._lock:
            self._bytes.update(measured)
            self._reads.update(reads)
            self._data[key] = result
            self._data.move_to_end(key)
            self._busy.pop(key, None)
            unread = self._evict()
        _remove(unread)

    def adopt(self, folders: Sequence) -> None:
        """Rule 8: the new-weight folders of a run whose results are cached: removed (and no longer
        counted) once no cached result reads them."""
        sizes = {str(f): _folder_bytes(f) for f in folders}
        with self._lock:
            self._folders.update(sizes)
            unread = self._evict()
        _remove(unread)

    def _evict(self) -> list[str]:
        """Under the lock: drop the oldest entries until the bounds hold (the newest entry always
        stays); the adopted folders no entry reads any more, for removal outside the lock."""
        while True:
            held = {id(s.model): s.model for r in self._data.values() for s in r.snapshots}
            self._bytes = {k: v for k, v in self._bytes.items() if k in held}
            total = sum(self._bytes.values())
            disk = sum(self._folders.get(f, 0) for f in self._read_folders(held))
            within = (len(self._data) <= self.max_entries and total <= self.max_bytes
                      and (self.max_disk_bytes is None or disk <= self.max_disk_bytes))
            if len(self._data) <= 1 or within:
                break
            self._data.popitem(last=False)
        read = self._read_folders(held)
        unread = [f for f in self._folders if f not in read]
        for f in unread:
            del self._folders[f]
        self._reads = {k: v for k, v in self._reads.items() if k in held}
        return unread

    def _read_folders(self, held: dict[int, onnx.ModelProto]) -> set[str]:
        out: set[str] = set()
        for m_id, model in held.items():
            got = self._reads.get(m_id)
            if got is None:
                got = self._reads[m_id] = weight_folders(model)
            out |= got & self._folders.keys()
        return out

    def discard(self, which: Callable[[tuple], bool]) -> None:
        """Drop the entries whose key ``which`` selects."""
        with self._lock:
            for key in [k for k in self._data if which(k)]:
                del self._data[key]
            unread = self._evict()
        _remove(unread)

    def held_bytes(self) -> int:
        with self._lock:
            return sum(self._bytes.values())

    def disk_bytes(self) -> int:
        """Bytes of the adopted new-weight folders the cached results read."""
        with self._lock:
            return sum(self._folders.values())

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._bytes.clear()
            self._reads.clear()
            unread, self._folders = list(self._folders), {}
        _remove(unread)


def weight_folders(model: onnx.ModelProto) -> frozenset[str]:
    """The folders ``model``'s on-disk initializers are read from (rule 8 looks for its own)."""
    base = model_io.weights_dir(model)
    if base is None:
        return frozenset()
    out = set()
    for t in model.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            for e in t.external_data:
                if e.key == "location":
                    out.add(os.path.normpath(os.path.join(base, os.path.dirname(e.value))))
    return frozenset(out)


_RUN_FOLDERS: list = []  # every new-weight folder a run of this process made (rule 8)


@atexit.register
def _remove_run_folders() -> None:
    _remove([str(f) for f in _RUN_FOLDERS])
    _RUN_FOLDERS.clear()


def _folder_bytes(folder) -> int:
    try:
        return sum(p.stat().st_size for p in Path(folder).iterdir() if p.is_file())
    except OSError:
        return 0


def _remove(folders: Sequence[str]) -> None:
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


def held_bytes(model: onnx.ModelProto) -> int:
    """Rule 5: the memory one snapshot holds of its own: its graph (nodes, inputs, outputs,
    value infos) and its in-memory initializers, by their dims and type (the data is not read
    or serialized: ``ByteSize`` would copy every in-memory weight). Weights on disk count
    nothing: every snapshot of the model shares them through one memory map (model_io rule 9),
    so the budget never counts them, once or again."""
    from fusionviz.graphview.model_graph import tensor_bytes

    g = model.graph
    total = sum(n.ByteSize() for n in g.node)
    total += sum(v.ByteSize() for v in (*g.input, *g.output, *g.value_info))
    for t in g.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            total += len(t.name) + 64
        else:
            total += tensor_bytes(t) or t.ByteSize()
    return total


def _pipeline_cache_mb() -> int:
    try:
        return max(16, int(os.environ.get("FUSIONVIZ_PIPELINE_CACHE_MB", "") or 512))
    except ValueError:
        return 512


def _pipeline_disk_mb() -> int:
    try:
        return max(64, int(os.environ.get("FUSIONVIZ_PIPELINE_CACHE_DISK_MB", "") or 4096))
    except ValueError:
        return 4096


PIPELINES = _PipelineCache(max_entries=96, max_bytes=_pipeline_cache_mb() * 2**20,
                           max_disk_bytes=_pipeline_disk_mb() * 2**20)


def pipeline(sha: str, passes: tuple[str, ...], shapes: tuple, _proto: onnx.ModelProto):
    """Rule 3: PipelineResult for ``passes`` (canonical order) on the model with hash ``sha``.

    The passes after the longest cached prefix run in one pipeline run (one validity check, no
    conversion of the model per pass), and every prefix it went through is cached on the way.
    With weights on disk the validity check runs after the result is returned (rule 7).
    """
    key = (sha, passes, shapes)
    got = PIPELINES.get(key)
    if got is not None:
        return got
    # No yield_to_pages() here: a prefetch thread would pause while holding this key's lock,
    # and a page asking for the same selection would wait on it (rule 4).
    with PIPELINES.busy(key):
        got = PIPELINES.get(key)
        if got is not None:
            return got
        return _extend(sha, passes, shapes, _proto)


def _extend(sha: str, passes: tuple[str, ...], shapes: tuple, proto: onnx.ModelProto):
    from fusionviz.passes.pipeline import new_weights_on_disk, run_pipeline

    base = None
    for k in range(len(passes) - 1, -1, -1):  # the longest cached prefix
        base = PIPELINES.get((sha, passes[:k], shapes))
        if base is not None:
            break
    if base is None:
        base, k = run_pipeline(proto, [], shapes={a: list(b) for a, b in shapes} or None), 0
        PIPELINES.put((sha, (), shapes), base)
        if not passes:
            return base
    later = _check_later(sha, proto)
    folders: list = []
    try:
        with new_weights_on_disk(folders):  # rule 8
            step = run_pipeline(base.final, list(passes[k:]), validate=not later)
    finally:
        _RUN_FOLDERS.extend(folders)  # removed at exit at the latest
    out = _chain(sha, passes, shapes, base, k, step)
    PIPELINES.adopt(folders)
    if later and any(r.changes for r in step.reports):
        _start_check(sha, passes, shapes, base, k, step)
    return out


def _chain(sha: str, passes: tuple[str, ...], shapes: tuple, base, k: int, step):
    """Cache the results for ``passes[:k+1]`` ... ``passes`` made of ``base`` (the result for
    ``passes[:k]``) and ``step`` (the run of the rest on its final model); the last one."""
    from fusionviz.passes.pipeline import PipelineResult

    copy = step.snapshots[0].model  # the run's copy of base.final: unchanged steps share it
    before = tuple(r.name for r in base.reports)
    snaps = tuple(dataclasses.replace(s, model=base.final) if s.model is copy else s for s in step.snapshots[1:])
    reports = tuple(_in_context(r, before) for r in step.reports)
    out = base
    for i in range(len(reports)):
        out = PipelineResult(snapshots=base.snapshots + snaps[: i + 1], reports=base.reports + reports[: i + 1],
                             seconds=base.seconds + sum(r.seconds for r in step.reports[: i + 1]),
                             notes=base.notes + step.notes)
        PIPELINES.put((sha, passes[: k + i + 1], shapes), out)
    return out


# ------------------------------------------------------------------ validity after the result (rule 7)

_CHECKS: dict[tuple, threading.Thread] = {}  # pipeline key -> its validity check, while it runs
_CHECKS_LOCK = threading.Lock()
_REVISION: dict[str, int] = {}  # model sha -> how often a checked result replaced a shown one
_CHECK_NOW: set[str] = set()  # models one of whose results broke the rule: checked before shown


def _check_later(sha: str, proto: onnx.ModelProto) -> bool:
    """Rule 7: whether the validity rule of a run on this model is applied after its result is
    shown: with weights on disk (big models, where the check costs seconds), unless a result of
    this model already broke the rule (``FUSIONVIZ_CHECK_LATER=0``: never)."""
    if os.environ.get("FUSIONVIZ_CHECK_LATER", "1") == "0" or sha in _CHECK_NOW:
        return False
    return model_io.weights_dir(proto) is not None


def checking(sha: str, passes: Sequence[str], shapes: tuple) -> bool:
    """Rule 7: whether the validity check of this selection's result is still to run or running."""
    with _CHECKS_LOCK:
        return (sha, tuple(passes), shapes) in _CHECKS


def start_checks() -> None:
    """Rule 7: start the validity checks waiting for a page run to end (a check holds the
    interpreter for seconds in onnx's checker: the page draws its graph first)."""
    with _CHECKS_LOCK:
        waiting = [t for t in _CHECKS.values() if t.ident is None]
    for thread in waiting:
        try:
            thread.start()
        except RuntimeError:  # started meanwhile by another session's run
            pass


def revision(sha: str) -> int:
    """Rule 7: how many times a result of this model was replaced after its check (0: never)."""
    return _REVISION.get(sha, 0)


def keyed_sha(sha: str) -> str:
    """Rule 7: the model's part of the key of everything computed from a pipeline result: its
    hash, with its revision once a checked result replaced a shown one."""
    rev = revision(sha)
    return f"{sha}@{rev}" if rev else sha


def _start_check(sha: str, passes: tuple[str, ...], shapes: tuple, base, k: int, step) -> threading.Thread:
    """Rule 7: a thread (started by :func:`start_checks`) that checks the result of ``step`` (run
    on ``base.final``) against the validity rule; when it breaks the rule, run the passes again with the rule applied pass by
    pass, replace the cached results, and bump the model's revision."""
    key = (sha, passes, shapes)

    def work() -> None:
        from fusionviz.passes import validity
        from fusionviz.passes.pipeline import run_pipeline

        try:
            _after_page_runs()  # the check holds the interpreter: the page's last messages go out first
            why = validity.violation(step.final, validity.Baseline(step.snapshots[0].model))
            if why is None:
                return
            logger.info("the shown result breaks the validity rule (%s); running the passes again", why)
            _CHECK_NOW.add(sha)
            checked = run_pipeline(base.final, list(passes[k:]))
            # Every result that went past the prefix may stand on the unchecked one: computed again.
            PIPELINES.discard(lambda x: x[0] == sha and len(x[1]) > k)
            if k == 0 or PIPELINES.get((sha, passes[:k], shapes)) is base:
                _chain(sha, passes, shapes, base, k, checked)
            _REVISION[sha] = _REVISION.get(sha, 0) + 1
        except Exception:  # noqa: BLE001 - the result stays shown; the log says why
            logger.exception("the validity check of %s failed", passes)
        finally:
            with _CHECKS_LOCK:
                _CHECKS.pop(key, None)

    thread = threading.Thread(target=work, name="fusionviz-validity", daemon=True)
    with _CHECKS_LOCK:
        _CHECKS[key] = thread
    return thread


def _in_context(report, before: tuple[str, ...]):
    """A report of a pass run on a prefix's result, as if run after ``before``: its ``after``
    names them too (and so does :attr:`~fusionviz.passes.pipeline.PassReport.failure`)."""
    return dataclasses.replace(report, after=tuple(before) + tuple(report.after or ()))


def run(loaded: LoadedModel, passes: Sequence[str], shapes_key: tuple):
    """The cached pipeline for ``loaded`` and ``passes``."""
    return pipeline(loaded.sha256, tuple(passes), shapes_key, loaded.proto)


@st.cache_data(max_entries=16, show_spinner=False)
def summary(sha: str, _proto: onnx.ModelProto):
    """``fusionviz.summary.summarize`` of a model."""
    from fusionviz.summary import summarize

    return summarize(_proto)


@st.cache_data(max_entries=16, show_spinner=False)
def model_cost(sha: str, shapes: tuple, _proto: onnx.ModelProto):
    """FLOPs/MACs of a model (``fusionviz.analysis.model_cost``)."""
    from fusionviz import analysis

    return analysis.model_cost(_proto, {k: list(v) for k, v in shapes} or None)


@st.cache_data(max_entries=64, show_spinner=False)
def memory_plan(key: tuple, shapes: tuple, _proto: onnx.ModelProto):
    """Static memory plan of a snapshot; ``key`` is (sha, passes, snapshot index)."""
    from fusionviz import analysis

    return analysis.memory_plan(_proto, {k: list(v) for k, v in shapes} or None)


@st.cache_resource(max_entries=64, show_spinner=False)
def verify(sha: str, passes: tuple[str, ...], inputs_key: tuple, exact: bool,
           _original: onnx.ModelProto, _optimized: onnx.ModelProto, _plan):
    """Verification of the pipeline result against its original (ORT, optimizations off) on the
    input sets of the InputPlan ``_plan`` (``inputs_key`` is its spec's key)."""
    from fusionviz.verify import verify as _verify

    # Isolated: an uploaded model that allocates gigabytes must not take the server down.
    return _verify(_original, _optimized, plan=_plan, report_only=not exact, isolated=True)


@st.cache_resource(max_entries=16, show_spinner=False)
def compare(key: tuple, inputs_key: tuple, _before: onnx.ModelProto, _after: onnx.ModelProto, _plan):
    """Per-tensor comparison of a snapshot pair (``key`` identifies it) on the InputPlan ``_plan``
    (``inputs_key``: its spec's key): a CompareResult, or the sentence saying why it could not run."""
    from fusionviz import errors
    from fusionviz.compare import compare_models

    try:  # isolated: an uploaded model that allocates gigabytes must not take the server down
        return compare_models(_before, _after, plan=_plan, isolated=True, labels=("before", "after"))
    except errors.FusionvizError as exc:
        return f"The comparison could not run: {exc}"


@st.cache_resource(max_entries=32, show_spinner="Checking the inputs on the original model...")
def input_plan(sha: str, spec_key: tuple, probe: bool, _proto: onnx.ModelProto, _spec):
    """(plan, error) for the model with hash ``sha`` and the InputSpec ``_spec`` (key ``spec_key``).

    With ``probe`` the plan is run once on the original when fusionviz chose a dim or value
    (``fusionviz.verify.probe``); when that fails, the unprobed plan comes back with the error.
    A spec that cannot be planned gives (None, error).
    """
    from fusionviz import errors
    from fusionviz.inputs import plan_inputs

    try:
        plan = plan_inputs(_proto, _spec)
    except errors.FusionvizError as exc:
        return None, getattr(exc, "page", None) or str(exc)  # the app's words, not a CLI flag
    if probe and plan.has_choices:
        from fusionviz.verify import probe as _probe

        try:
            plan = _probe(_proto, plan)
        except errors.FusionvizError as exc:
            return plan, str(exc)
    return plan, None


@st.cache_resource(max_entries=64, show_spinner=False)
def diff(key: tuple, _before: onnx.ModelProto, _after: onnx.ModelProto):
    """``graphview.diff_models`` for a snapshot pair; ``key`` identifies the pair."""
    from fusionviz.graphview import diff_models

    return diff_models(_before, _after)


@st.cache_data(max_entries=64, show_spinner=False)
def render(key: tuple, side: str, opts: tuple, _model: onnx.ModelProto, _diff):
    """``graphview.render_graph`` for one side of a pair; returns the Rendered record."""
    from fusionviz.graphview import RenderOptions, render_graph

    options = RenderOptions(**dict(opts))
    return render_graph(_model, diff=_diff, side=side, options=options)


@st.cache_data(max_entries=64, show_spinner=False)
def node_details(key: tuple, name: str, _model: onnx.ModelProto) -> dict:
    """``graphview.node_details`` of one node in one snapshot."""
    from fusionviz.graphview import node_details as _details

    return _details(_model, name)


@st.cache_resource(max_entries=16, show_spinner="Running onnxruntime's optimizer for reference...")
def reference(sha: str, label: str, shapes: tuple, _proto: onnx.ModelProto):
    """One reference model (``ort:LEVEL``, ``onnxslim``, ...) from
    ``fusionviz.passes.reference.reference_models``: a ModelProto, or the tool's FusionvizError."""
    from fusionviz.passes import reference as ref

    if label.startswith("ort:"):
        tools, levels = [], [label.split(":", 1)[1]]
    else:
        tools, levels = [label], []
    out = ref.reference_models(_proto, shapes={k: list(v) for k, v in shapes} or None,
                               tools=tools, levels=levels)
    return out.get(label)


# ------------------------------------------------------------------ speculative warm-up

_PREFETCH_LOCK = threading.Lock()
_PREFETCH_GEN = [0]
PREFETCH_MAX_NODES = 500
_ACTIVE_RUNS = [0]  # page runs in progress (all sessions)
_LOCAL = threading.local()


def page_run_started() -> None:
    """A page run began: speculative work pauses (it shares the GIL with the page)."""
    with _PREFETCH_LOCK:
        _ACTIVE_RUNS[0] += 1


def page_run_finished() -> None:
    """A page run ended."""
    with _PREFETCH_LOCK:
        _ACTIVE_RUNS[0] = max(0, _ACTIVE_RUNS[0] - 1)


def yield_to_pages(max_wait_s: float = 10.0) -> None:
    """In a prefetch thread: wait while any page run is in progress.

    Called only between cached calls, never inside one: a cached function holds its key's lock
    while it runs, and a page waiting on that lock would wait for this very pause.
    """
    if not getattr(_LOCAL, "prefetch", False):
        return
    deadline = time.monotonic() + max_wait_s
    while _ACTIVE_RUNS[0] > 0 and time.monotonic() < deadline:
        time.sleep(0.05)


def _after_page_runs(max_wait_s: float = 10.0, settle_s: float = 0.3) -> None:
    """Wait until no page run is in progress, then ``settle_s`` more (Streamlit ends a run and
    sends its last messages after the page's code returns)."""
    deadline = time.monotonic() + max_wait_s
    while _ACTIVE_RUNS[0] > 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(settle_s)


def prefetch_max_load() -> float:
    """Load average above which no speculative work runs (``FUSIONVIZ_PREFETCH_MAX_LOAD``,
    default twice the CPU count)."""
    try:
        return float(os.environ.get("FUSIONVIZ_PREFETCH_MAX_LOAD", "") or 2 * (os.cpu_count() or 1))
    except ValueError:
        return 2.0 * (os.cpu_count() or 1)


def _busy() -> bool:
    try:
        return os.getloadavg()[0] > prefetch_max_load()
    except OSError:  # no load average on this platform
        return False


def _passes_view(sha: str, passes: tuple[str, ...], shapes: tuple, opts: tuple, proto) -> None:
    """Everything the Passes page computes for one selection before its graph is drawn."""
    result = pipeline(sha, passes, shapes, proto)
    key = (keyed_sha(sha), passes, shapes, "final")
    yield_to_pages()
    d = diff(key, result.original, result.final)
    yield_to_pages()
    rendered = render(key, "after", opts, result.final, d)
    yield_to_pages()
    from fusionviz.ui.graph_component import svg_for

    try:
        svg_for(rendered.dot)  # the viewer's byte-bounded LRU, which the page reads
    except Exception:  # noqa: BLE001 - the page falls back to the browser renderer
        logger.debug("prefetch: no SVG", exc_info=True)


def prefetch_neighbours(loaded: LoadedModel, passes: Sequence[str], shapes: tuple, opts: tuple,
                        candidates: Sequence[str]) -> threading.Thread | None:
    """Rule 4: in one background thread (lowered priority), compute the views for every selection
    one toggle away from ``passes``, so that the next toggle is a cache hit.

    Only for models of at most PREFETCH_MAX_NODES nodes; a newer call supersedes an older one;
    ``FUSIONVIZ_PREFETCH=0`` switches it off (the AppTest suite does, to keep runs independent).
    Speculative work needs idle CPU: it does not start, and stops between selections, while the
    machine's load average is above :func:`prefetch_max_load` (several users at once, or other
    work on the machine: then it would only slow every page down).
    """
    from fusionviz.passes import registry
    from fusionviz.passes.pipeline import count_nodes

    if os.environ.get("FUSIONVIZ_PREFETCH", "1") == "0" or count_nodes(loaded.proto) > PREFETCH_MAX_NODES:
        return None
    if _busy():
        return None
    with _PREFETCH_LOCK:
        _PREFETCH_GEN[0] += 1
        gen = _PREFETCH_GEN[0]
    current = set(passes)
    targets = [tuple(p.name for p in registry.resolve(current ^ {c})) for c in candidates]

    def work() -> None:
        _LOCAL.prefetch = True
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        except (OSError, AttributeError):
            pass
        for sel in targets:
            if _PREFETCH_GEN[0] != gen or _busy():
                return
            yield_to_pages()
            try:
                _passes_view(loaded.sha256, sel, shapes, opts, loaded.proto)
            except Exception:  # noqa: BLE001 - speculative work never matters to the user
                logger.debug("prefetch of %s failed", sel, exc_info=True)

    thread = threading.Thread(target=work, name="fusionviz-prefetch", daemon=True)
    # The thread calls the page's st.cache functions: with the run's context, not a "missing
    # ScriptRunContext" warning per call in the server log (it draws nothing).
    from streamlit.runtime.scriptrunner import add_script_run_ctx, get_script_run_ctx

    ctx = get_script_run_ctx(suppress_warning=True)
    if ctx is not None:
        add_script_run_ctx(thread, ctx)
    thread.start()
    return thread


@functools.lru_cache(maxsize=1)
def backend_availability() -> tuple[tuple[str, ...], dict[str, str]]:
    """(backends usable here, {backend: why not}) — each backend's import is tried once per server."""
    from fusionviz.backends.registry import availability

    got = availability()
    return tuple(b for b, why in got.items() if why is None), {b: why for b, why in got.items() if why}


@st.cache_resource(max_entries=16, show_spinner=False)
def node_times(key: tuple, inputs_key: tuple, _model: onnx.ModelProto, _plan):
    """``profile.node_times`` of one snapshot (``key`` identifies it and its side) on the InputPlan
    ``_plan``, run in a child process: a NodeTimes, or the sentence saying why it could not run."""
    from fusionviz import errors
    from fusionviz.profile import node_times as _node_times

    try:  # isolated: an uploaded model that allocates gigabytes must not take the server down
        return _node_times(_model, _plan.feeds("user" if _plan.user_data else "normal"), isolated=True)
    except errors.FusionvizError as exc:
        return f"The nodes could not be timed: {exc}"


@st.cache_resource(max_entries=32, show_spinner=False)
def memory_overlay(key: tuple, inputs_key: tuple, measured: bool, _model: onnx.ModelProto, _shapes, _measured):
    """``graphview.overlays.memory_overlay`` of one snapshot; ``measured`` says whether ``_measured``
    (the profile's bytes written, for outputs shape inference cannot size) is given."""
    from fusionviz.graphview.overlays import memory_overlay as _memory

    return _memory(_model, _shapes or None, _measured)
