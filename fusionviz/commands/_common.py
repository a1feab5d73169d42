"""Shared CLI helpers: loading a MODEL argument (path or sample name), --shape, JSON out."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fusionviz import errors, model_io, samples
from fusionviz.inputs import InputSpec, parse_shape_arg, parse_value_arg


def add_model_arg(p) -> None:
    p.add_argument("model", metavar="MODEL", help="path to .onnx / folder / .zip, or a sample name")


def _parsed(parse, flag: str):
    """An argparse ``type`` from a parser of ``fusionviz.inputs``: each ``--shape`` / ``--input`` /
    ``--freeze`` is parsed once, where argparse reads it, into a (name, value) pair; a bad one is
    argparse's one-line error (exit 2)."""
    def convert(text: str):
        try:
            return parse(text)
        except errors.FusionvizError as exc:
            msg = str(exc)
            raise argparse.ArgumentTypeError(msg[len(flag) + 1:] if msg.startswith(f"{flag} ") else msg) from None

    convert.__name__ = flag.lstrip("-")  # argparse names the type in its messages
    return convert


def add_shape_arg(p) -> None:
    p.add_argument("--shape", action="append", default=[], metavar="NAME=d1,d2,..",
                   type=_parsed(parse_shape_arg, "--shape"),
                   help="concrete shape for an input with symbolic dims (repeatable; NAME may hold ':' '/' spaces)")


def add_pass_args(p, *, group=None) -> None:
    """``--passes a,b`` or ``--all`` (the default: every pass that keeps outputs equal)."""
    g = group if group is not None else p.add_mutually_exclusive_group()
    g.add_argument("--passes", default=None, help="comma-separated pass names (canonical order is used)")
    g.add_argument("--all", action="store_true", help="every pass that keeps outputs equal (the default)")


def pass_names_of(args) -> list[str]:
    """The passes ``--passes`` / ``--all`` name, checked and in canonical order (one line when one is unknown)."""
    from fusionviz.passes import registry

    if getattr(args, "all", False) or args.passes is None:
        names = registry.default_passes()
    else:
        names = [n for n in args.passes.split(",") if n.strip()]
        if not names:
            raise errors.InputSpecError("--passes is empty; name at least one pass or use --all.")
    return [p.name for p in registry.resolve(names)]


def add_input_args(p) -> None:
    """--shape, --input NAME=VALUE and --inputs FILE: what the user says about the inputs."""
    add_shape_arg(p)
    p.add_argument("--input", action="append", default=[], metavar="NAME=VALUE", dest="input_values",
                   type=_parsed(parse_value_arg, "--input"),
                   help="one value for an input, e.g. a sample rate: --input sr=16000 (repeatable)")
    p.add_argument("--inputs", metavar="FILE.npz|.npy", dest="inputs_file",
                   help="your own input data: a .npz with one array per input name (or a .npy for a "
                        "one-input model); verified as an extra input set and used by bench")


def add_freeze_arg(p) -> None:
    """--freeze NAME=VALUE: specialize the optimized model for one value of an input."""
    p.add_argument("--freeze", action="append", default=[], metavar="NAME=VALUE",
                   type=_parsed(parse_value_arg, "--freeze"),
                   help="make input NAME the constant VALUE in the optimized model, which then no longer takes "
                        "it (an If on it folds to one branch); the original is fed VALUE, e.g. --freeze sr=16000 "
                        "(repeatable)")


def freeze_of(args, plan) -> dict | None:
    """``--freeze``'s inputs → the value arrays the plan feeds them (dtype and shape of the input)."""
    names = list(frozen_values(args))
    if not names:
        return None
    feeds = plan.feeds("normal")
    return {n: feeds[n] for n in names}


def input_spec_of(args, model) -> InputSpec:
    """The InputSpec from --shape / --input / --inputs (the file is checked against ``model``)."""
    from fusionviz.inputs import load_data

    data = None
    path = getattr(args, "inputs_file", None)
    if path:
        try:
            raw = Path(path).read_bytes()
        except OSError as exc:
            raise errors.InputSpecError(f"Cannot read '{path}': {exc.strerror}.") from None
        data = load_data(raw, path, model)
    shapes = {k: tuple(v) for k, v in shapes_of(args).items()}
    values = given_values(args)
    for name, value in frozen_values(args).items():
        if name in values and values[name] != value:
            raise errors.InputSpecError(f"--input {name}={values[name]} and --freeze {name}={value} disagree.")
        values[name] = value  # the original is fed the frozen value
    return InputSpec(shapes=shapes, values=values, data=data, data_label=Path(path).name if path else "")


def input_plan_of(args, model, *, run_check: bool = True):
    """The inputs for ``model`` (sizes checked; with ``run_check``, probed on the original)."""
    from fusionviz.inputs import plan_inputs

    plan = plan_inputs(model, input_spec_of(args, model))
    if run_check:
        from fusionviz.verify import probe

        plan = probe(model, plan)
    return plan


def load_with_plan(args, *, run_check: bool = True):
    """MODEL, its input plan (said to the user), ``--shape`` and the feeds bench and tune time with.

    Returns:
        ``(loaded, plan, shapes, feeds)``.
    """
    loaded = load_model_arg(args.model)
    plan = input_plan_of(args, loaded.proto, run_check=run_check)  # the inputs verify uses
    say_inputs(plan)
    return loaded, plan, shapes_of(args), plan.feeds("user" if plan.user_data else "normal")


def say_inputs(plan) -> None:
    """Tell the user the inputs used, when fusionviz chose any dim or value."""
    if plan.has_choices:
        for line in plan.describe_lines():
            progress(f"input {line}")


def load_model_arg(text: str) -> model_io.LoadedModel:
    path = Path(text)
    if not path.exists() and text in samples.sample_names():
        return samples.load_sample(text)
    loaded = model_io.load_path(path)
    for note in loaded.notes:  # what loading changed (e.g. nodes sorted into topological order)
        progress(f"note: {note}")
    return loaded


def shapes_of(args) -> dict[str, list[int]]:
    """``--shape``'s input name -> dims (parsed by argparse: :func:`_parsed`)."""
    return dict(getattr(args, "shape", None) or [])


def given_values(args) -> dict[str, float | int | bool]:
    """``--input``'s input name -> value."""
    return dict(getattr(args, "input_values", None) or [])


def frozen_values(args) -> dict[str, float | int | bool]:
    """``--freeze``'s input name -> value."""
    return dict(getattr(args, "freeze", None) or [])


def write_json(obj, path: str | None) -> None:
    text = json.dumps(obj, indent=2, default=_default)
    if path in (None, "-"):
        sys.stdout.write(text + "\n")
        return
    try:
        Path(path).write_text(text)
    except OSError as exc:
        raise errors.InputSpecError(f"Cannot write '{path}': {exc.strerror}.") from None


def _default(o):
    if hasattr(o, "as_dict"):
        return o.as_dict()
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "value"):
        return o.value
    return str(o)


def progress(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()
