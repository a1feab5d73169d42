"""The error of a reduced-precision model against fp32, and whether it runs at all."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import onnx

CALIBRATION_SAMPLES = 8


@dataclasses.dataclass(frozen=True)
class PrecisionError:
    """Error of a reduced-precision model against fp32 (see :func:`fusionviz.verify.verify`)."""

    max_abs_diff: float
    min_cosine: float
    top1_agreement: float | None
    error: str | None = None

    def describe(self) -> str:
        if self.error:
            return f"error not measured: {self.error}"
        text = f"max abs error {self.max_abs_diff:.3g}, cosine {self.min_cosine:.6f}"
        if self.top1_agreement is not None:
            text += f", top-1 agreement {self.top1_agreement:.1%}"
        return text

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def precision_error(original: onnx.ModelProto, converted: onnx.ModelProto, *,
                    shapes: Mapping[str, Sequence[int]] | None = None,
                    feeds: Mapping[str, np.ndarray] | None = None) -> PrecisionError:
    """Report-only comparison of ``converted`` against ``original``.

    On ``feeds``, or else on one deterministic ``normal`` input set that calibration did not
    see (seed :data:`CALIBRATION_SAMPLES`): the error of reduced precision on representative
    data. Verification's extreme-value set would measure int8 saturation instead.
    """
    from fusionviz.inputs import make_inputs
    from fusionviz.verify import verify

    if feeds is None:
        try:
            feeds = make_inputs(original, shapes, seed=CALIBRATION_SAMPLES)
        except Exception:  # noqa: BLE001 - no plan for these inputs: let verify choose and say why
            feeds = None
    v = verify(original, converted, shapes=shapes, feeds=feeds, report_only=True)
    top1 = [o.top1_agreement for o in v.outputs if o.top1_agreement is not None]
    return PrecisionError(v.max_abs_diff, v.min_cosine, min(top1) if top1 else None, v.error)


def runtime_failure(original: onnx.ModelProto, converted: onnx.ModelProto) -> str | None:
    """Rule 4: why onnxruntime cannot load or run ``converted`` on inputs ``original`` runs on,
    or None (also when ``original`` itself does not run on them: then nothing is known)."""
    from fusionviz import errors
    from fusionviz.inputs import make_inputs
    from fusionviz.verify import make_session, run_model

    try:
        feeds = make_inputs(original, seed=CALIBRATION_SAMPLES)
        run_model(make_session(original), feeds)
    except Exception:  # noqa: BLE001 - no inputs for it, or it fails itself: nothing to judge
        return None
    try:
        run_model(make_session(converted), feeds)
    except errors.FusionvizError as exc:
        return f"the converted model does not run: {exc}"
    return None
