"""What one measured variant is: a model, its runtime settings, and the role it plays.

Rules:

1. A variant's **role** says why it is in the experiment: the original, a pass selection, one
   step of the cumulative what-if (``step`` and its pass), one variant of leave-one-out
   (``drop`` and its pass, beside ``all``: every active pass), the original under another
   onnxruntime level (``level``), another tool's optimized model (``reference``), or the original
   on another backend (``backend``). Readers (the what-if effects, tune, the tables) ask the role,
   never the label.
2. The **label** is for display only. :mod:`fusionviz.experiment.labels` makes it from the role
   and the settings, in one place; nothing parses it back.
3. What a variant *is* (for measuring it once) is its model and its :class:`Settings`
   (:mod:`fusionviz.bench.identity`); neither the label nor the role plays a part.
"""

from __future__ import annotations

import dataclasses

import onnx

from fusionviz import errors
from fusionviz.ortlevels import LEVELS

ORIGINAL = "original"
SELECTION = "selection"
STEP = "step"
DROP = "drop"
ALL = "all"
LEVEL = "level"
REFERENCE = "reference"
BACKEND = "backend"
KINDS = (ORIGINAL, SELECTION, STEP, DROP, ALL, LEVEL, REFERENCE, BACKEND)


@dataclasses.dataclass(frozen=True)
class Role:
    """Why a variant is measured (rule 1).

    Attributes:
        kind: one of :data:`KINDS`.
        name: the pass (``step``, ``drop``), the selection's name (``selection``), the tool
            (``reference``), the level (``level``), the backend (``backend``); "" otherwise.
    """

    kind: str
    name: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown variant role '{self.kind}'; use one of {', '.join(KINDS)}")

    @property
    def pass_name(self) -> str | None:
        """The pass a ``step`` adds or a ``drop`` leaves out, else None."""
        return self.name if self.kind in (STEP, DROP) else None

    @property
    def is_original(self) -> bool:
        """True for the original model, under any settings (original, level, backend)."""
        return self.kind in (ORIGINAL, LEVEL, BACKEND)

    def as_dict(self) -> dict:
        return {"kind": self.kind, "name": self.name}

    @classmethod
    def from_dict(cls, d: dict | None) -> Role | None:
        return None if not d else cls(d["kind"], d.get("name", ""))


@dataclasses.dataclass(frozen=True)
class Settings:
    """Runtime settings for one variant.

    Attributes:
        level: onnxruntime graph optimization level, one of ``fusionviz.ortlevels.LEVELS``
            (the ``ort`` backend; the others run their own full pipeline).
        threads: intra-op threads.
        provider: onnxruntime execution provider (one of ``onnxruntime.get_available_providers()``).
        disabled_optimizers: onnxruntime optimizer names to switch off (unknown names are
            ignored by onnxruntime).
        denormal_as_zero: flush denormals to zero, in each backend's own way
            (``session.set_denormal_as_zero``; OpenVINO ``CPU_DENORMALS_OPTIMIZATION``).
        backend: the runtime (``fusionviz.backends.backend_names()``); "ort" is onnxruntime.
    """

    level: str = "off"
    threads: int = 1
    provider: str = "CPUExecutionProvider"
    disabled_optimizers: tuple[str, ...] = ()
    denormal_as_zero: bool = False
    backend: str = "ort"

    def __post_init__(self) -> None:
        from fusionviz.backends.registry import canonical

        object.__setattr__(self, "backend", canonical(self.backend))
        if self.level not in LEVELS:
            raise errors.InputSpecError(
                f"Unknown onnxruntime level '{self.level}'; use one of {', '.join(LEVELS)}."
            )
        if not isinstance(self.threads, int) or self.threads < 1 or self.threads > 256:
            raise errors.InputSpecError(f"Threads must be an integer from 1 to 256, not {self.threads!r}.")
        object.__setattr__(self, "disabled_optimizers", tuple(self.disabled_optimizers))

    def describe(self) -> str:
        from fusionviz.backends.registry import TITLES

        threads = f"{self.threads} thread{'s' if self.threads != 1 else ''}"
        if self.backend == "ort":
            parts = [f"ORT {self.level}", threads]
        elif self.backend == "trt":
            parts = [TITLES[self.backend], threads]
        else:
            parts = [f"{TITLES[self.backend]} CPU f32", threads]
        if self.backend == "ort" and self.provider != "CPUExecutionProvider":
            parts.append(self.provider.replace("ExecutionProvider", ""))
        if self.backend == "ort" and self.disabled_optimizers:
            parts.append("without " + ", ".join(self.disabled_optimizers))
        if self.denormal_as_zero:
            parts.append("denormals as zero")
        return ", ".join(parts)

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["disabled_optimizers"] = list(self.disabled_optimizers)
        return d


@dataclasses.dataclass(frozen=True)
class Variant:
    """One thing to measure: a model plus its settings, in a role.

    Attributes:
        label: unique display name (made by :func:`fusionviz.experiment.labels.label`).
        model: the model (proto or serialized bytes).
        settings: runtime settings.
        passes: the fusionviz passes that produced ``model`` (for display and reports).
        role: why it is measured (rule 1); a variant built without one is a selection named
            by its label.
    """

    label: str
    model: onnx.ModelProto | bytes
    settings: Settings = Settings()
    passes: tuple[str, ...] = ()
    role: Role | None = None

    def __post_init__(self) -> None:
        if not self.label or not str(self.label).strip():
            raise errors.InputSpecError("Every benchmark variant needs a non-empty label.")
        object.__setattr__(self, "passes", tuple(self.passes))
        if self.role is None:
            object.__setattr__(self, "role", Role(SELECTION, str(self.label)))

    def model_bytes(self) -> bytes:
        return self.model if isinstance(self.model, bytes) else self.model.SerializeToString()

    def model_proto(self) -> onnx.ModelProto:
        if isinstance(self.model, onnx.ModelProto):
            return self.model
        m = onnx.ModelProto()
        m.ParseFromString(self.model)
        return m
