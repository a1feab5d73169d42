"""New weights on disk (rule 10 of :mod:`fusionviz.model_io`): the large tensors the passes make
(a fused attention's packed QKV weight, a folded constant, an fp16 copy) are written to a data
file of this process's own and memory-mapped, instead of held in memory beside the model's
weights that already stay on disk (rule 9).

A model's external tensors are read relative to one folder, and onnxruntime (like onnx-ir)
refuses a location that leaves it: absolute, ``..``, a symlink that resolves outside, and
onnx-ir a file with a second hard link. So the new data file is written into a folder of its
own under the system's temp folder, and the model's weights folder becomes the deepest folder
holding both that one and the model's own (``/`` when nothing deeper does): each tensor's
location is its path below it. The model's own locations were checked by rule 3 before, and
fusionviz writes the new ones, so nothing a file says is followed. Every consumer of the
weights folder (the passes, sessions here and in child processes, saving) works unchanged, and
no byte of the model's weights is copied.

The rule applies to a model whose external tensors are all main-graph initializers (rule 9's
form, and what exporters write); for another, or where the two folders share no root (two
drives), the new tensors stay in memory, as without this rule. The data file is only appended
to: a snapshot made before a later pass wrote more still reads its tensors where they were.
The folder is removed when the command ends (:func:`fusionviz.passes.pipeline.new_weights_on_disk`),
or else when the process does; one left by a process that was killed is removed by the next
process that makes one (its name holds the process id: :func:`remove_stale_folders`).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

import onnx
import onnx_ir as ir

from fusionviz.model_io.proto import iter_tensors
from fusionviz.model_io.weights import (
    _ALIGN,
    _OWNED_DIRS,
    ON_DISK_MIN_TENSOR,
    WEIGHTS_DIR_KEY,
    weights_dir,
)

logger = logging.getLogger(__name__)

#: The data file new tensors are appended to (another name when the model reads one so named).
NEW_WEIGHTS_FILE = "fusionviz_new_weights.data"

#: A new-weights folder's name: this prefix, the process id, ``_`` and mkdtemp's random part.
FOLDER_PREFIX = "fusionviz_weights_"


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: alive
        return True
    return True


def remove_stale_folders(temp: str | os.PathLike | None = None) -> int:
    """Remove the new-weights folders in the temp folder whose process is gone (killed before
    it could remove them: a memory cap, a timeout, a server stopped by a signal); returns how
    many. A folder of a running process, or one this cannot attribute, is left alone."""
    temp = Path(temp or tempfile.gettempdir())
    removed = 0
    try:
        entries = list(temp.iterdir())
    except OSError:
        return 0
    for entry in entries:
        pid, sep, _ = entry.name.removeprefix(FOLDER_PREFIX).partition("_")
        if (not entry.name.startswith(FOLDER_PREFIX) or not sep or not pid.isdigit()
                or int(pid) == os.getpid() or _process_alive(int(pid)) or not entry.is_dir()):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed += not entry.exists()
    if removed:
        logger.info("removed %d new-weights folder(s) left by processes that ended", removed)
    return removed


class NewWeights:
    """Where one run of the passes writes its new large tensors (rule 10).

    Made for a model whose weights stay on disk (:meth:`for_model`); the folder is made when the
    first tensor is written (a run that makes none costs nothing).
    """

    def __init__(self, source: str, owned: list[Path] | None = None) -> None:
        self.source = source
        self.owned = owned  # where the folder is also listed, for its owner to remove earlier
        self.folder: Path | None = None  # the new data file's
        self.base = ""  # the weights folder after the first write: holds source and folder
        self.failed = False
        self._prefix = ""  # source below base
        self._location = ""  # the new data file below base
        self._end = 0

    @classmethod
    def for_model(cls, model: onnx.ModelProto, owned: list[Path] | None = None) -> NewWeights | None:
        """For ``model``'s passes when its weights stay on disk, all as main-graph initializers;
        None otherwise. ``owned``: a list the folder is appended to, for its owner to remove
        (it is removed when the process ends in any case)."""
        source = weights_dir(model)
        if source is None:
            return None
        external = sum(t.data_location == onnx.TensorProto.EXTERNAL for t in iter_tensors(model))
        if external != sum(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
            return None
        return cls(source, owned)

    def _open(self) -> bool:
        if self.folder is not None or self.failed:
            return not self.failed
        try:
            remove_stale_folders()
            folder = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}_")).resolve()
        except OSError as exc:  # no temp folder to write to
            self.failed = True
            logger.info("new weights stay in memory: no folder for them (%s)", exc)
            return False
        source = Path(self.source).resolve()
        try:
            base = Path(os.path.commonpath([source, folder]))
        except ValueError:  # two drives
            shutil.rmtree(folder, ignore_errors=True)
            self.failed = True
            logger.info("new weights stay in memory: %s and %s share no folder", source, folder)
            return False
        _OWNED_DIRS.append(folder)
        if self.owned is not None:
            self.owned.append(folder)
        self.folder, self.base = folder, str(base)
        below = source.relative_to(base)
        self._prefix = "" if below == Path(".") else below.as_posix()
        self._location = (folder / NEW_WEIGHTS_FILE).relative_to(base).as_posix()
        return True

    def _below_base(self, t: ir.ExternalTensor) -> ir.ExternalTensor:
        location = f"{self._prefix}/{t.location}" if self._prefix else t.location
        return ir.ExternalTensor(location, t.offset, t.length, t.dtype, shape=t.shape, name=t.name,
                                 doc_string=t.doc_string, metadata_props=dict(t.metadata_props), base_dir=self.base)

    def _write(self, name: str, tensor: ir.TensorProtocol) -> ir.ExternalTensor:
        data = tensor.tobytes()
        offset = self._end + (-self._end % _ALIGN)  # page-aligned: onnxruntime can map it
        with open(self.folder / NEW_WEIGHTS_FILE, "ab") as f:
            f.write(b"\0" * (offset - self._end))
            f.write(data)
        self._end = offset + len(data)
        return ir.ExternalTensor(self._location, offset, len(data), tensor.dtype, shape=tensor.shape, name=name,
                                 doc_string=tensor.doc_string, metadata_props=dict(tensor.metadata_props),
                                 base_dir=self.base)

    def take(self, model: ir.Model) -> int:
        """Move ``model``'s main-graph initializers held in memory with at least
        ``ON_DISK_MIN_TENSOR`` bytes to the data file, the model's own external tensors to
        locations below the common folder, and name that folder as its weights folder. Returns
        how many moved (0: none, or the rule does not apply)."""
        big = [v for v in model.graph.initializers.values()
               if v.const_value is not None and not isinstance(v.const_value, ir.ExternalTensor)
               and v.const_value.dtype != ir.DataType.STRING and v.const_value.nbytes >= ON_DISK_MIN_TENSOR]
        if not big:
            return 0
        folder = model.metadata_props.get(WEIGHTS_DIR_KEY)
        if folder not in (self.source, self.base) or not self._open():
            return 0
        if folder == self.source and self._prefix:  # the first write into this copy of the model
            for v in model.graph.initializers.values():
                if isinstance(v.const_value, ir.ExternalTensor):
                    v.const_value = self._below_base(v.const_value)
        for v in big:
            v.const_value = self._write(v.name, v.const_value)
        model.metadata_props[WEIGHTS_DIR_KEY] = self.base
        return len(big)
