"""`python -m fusionviz ...`: the command-line contract (DESIGN.md, "CLI").

Exit status: 0 success; 2 bad input (one line on stderr, never a traceback); 3 verification
failed (optimize). Each subcommand lives in ``fusionviz/commands/<name>.py`` with
``register(subparsers)``; handlers return an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from fusionviz import errors

COMMANDS = (
    "passes",
    "info",
    "optimize",
    "render",
    "diff",
    "compare",
    "explain",
    "bisect",
    "bench",
    "tune",
    "sweep",
    "export_me",
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2
        sys.stderr.write(f"fusionviz: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m fusionviz", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMANDS:
        try:
            mod = importlib.import_module(f"fusionviz.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"fusionviz.commands.{name}":
                continue  # command not built yet
            raise
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except errors.FusionvizError as exc:
        sys.stderr.write(f"fusionviz: error: {exc}\n")
        return exc.exit_code
    except BrokenPipeError:  # e.g. `python -m fusionviz passes | head`: not an error
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        except OSError:
            pass
        return 0
    except KeyboardInterrupt:
        sys.stderr.write("fusionviz: interrupted\n")
        return 130
    except MemoryError:
        sys.stderr.write("fusionviz: error: out of memory while processing the model.\n")
        return 2
    except Exception as exc:  # noqa: BLE001 - last line of defence: no traceback reaches a user
        if os.environ.get("FUSIONVIZ_DEBUG"):
            raise
        msg = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        sys.stderr.write(f"fusionviz: internal error: {msg} (set FUSIONVIZ_DEBUG=1 for a traceback)\n")
        return 1
