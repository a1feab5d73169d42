"""The base of the precision passes: convert with a tool, repair, measure the error vs fp32."""

from __future__ import annotations

import logging

import onnx
import onnx_ir as ir

from fusionviz import errors
from fusionviz.passes.base import Category, Change, ChangeKind, Outcome, Pass, PreconditionError
from fusionviz.passes.precision.error import precision_error, runtime_failure
from fusionviz.passes.precision.tools import lift_constant_weights, repaired

logger = logging.getLogger(__name__)


class ToolPass(Pass):
    """A precision pass: onnxruntime's tool converts a copy; the result is a new model."""

    category = Category.PRECISION
    in_place = False
    exact = False
    needs_shapes = False

    def convert(self, proto: onnx.ModelProto, **options) -> onnx.ModelProto:  # pragma: no cover - abstract
        raise NotImplementedError

    def prepare(self, model: ir.Model) -> dict:
        """Keyword arguments for :meth:`convert` that need the IR model (none by default)."""
        return {}

    def finish(self, model: ir.Model, original: onnx.ModelProto) -> None:
        """Fix-ups of the converted model, in place (none by default)."""

    def _run(self, model: ir.Model) -> tuple[ir.Model | None, str]:
        from fusionviz import model_io

        options = self.prepare(model)
        proto = ir.serde.serialize_model(model)
        tool_input = onnx.ModelProto()
        if model_io.weights_dir(proto) is None:
            tool_input.CopyFrom(proto)
        else:  # the tools read weights from the message: those kept on disk are read into the copy
            try:
                tool_input.ParseFromString(model_io.one_file_bytes(proto))
            except errors.ModelTooLargeError as exc:
                raise PreconditionError(f"{exc} The conversion tool works on one in-memory message.") from None
        lift_constant_weights(tool_input)
        try:
            converted = self.convert(tool_input, **options)
            new = repaired(converted, proto)
            self.finish(new, proto)
        except Exception as exc:  # noqa: BLE001 - rule 4: a pass that does not apply never raises
            reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            logger.info("%s: not applied: %s", self.name, reason)
            return None, reason
        result = ir.serde.serialize_model(new)
        err = precision_error(proto, result)
        if err.error:
            why = runtime_failure(proto, result)
            if why:  # rule 4: the tool wrote a model onnxruntime cannot run
                logger.info("%s: not applied: %s", self.name, why)
                return None, why
        return new, err.describe()

    def transform(self, model: ir.Model) -> Outcome | None:
        """The converted model, and a summary Change whose detail is the error vs fp32."""
        new, detail = self._run(model)
        if new is None:
            return None
        return Outcome(new, (Change(ChangeKind.CHANGED, self.name, (), (), (), (), f"{self.title}: {detail}"),))
