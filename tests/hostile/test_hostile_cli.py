"""Every hostile input through the real CLI.

For each case of :mod:`.corpus` and each command (``info`` and ``optimize`` always; ``render`` and
``bench`` as soon as they are registered in the CLI):

- a bad input exits 2 with exactly one stderr line ``fusionviz: error: <reason>``, the reason
  naming the actual problem (words from the case), no traceback, nothing on stdout;
- a valid input (hostile names, custom ops, huge declared dims) exits 0 for ``info`` with the
  model-derived text escaped (no raw control characters), and 0/3 (or 2 with a reason, when
  onnxruntime cannot run it) for the other commands;
- every run finishes within a bound, under an address-space cap (a hostile model must not be
  able to take the machine down), and writes nothing except its ``-o`` output: the model's
  folder, the working directory and ``$TMPDIR`` are compared before and after.

The runs of one command are made concurrently (a few at a time) once per session, then each case
is asserted in its own test.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fusionviz import cli, errors, model_io

from .corpus import CASE_NAMES, Case, build_corpus

ALWAYS = ("info", "optimize")
OPTIONAL = ("render", "bench")
MEM_LIMIT = 4 * 1024**3
BOUND_S = {"info": 20.0, "optimize": 60.0, "render": 60.0, "bench": 120.0}
WORKERS = 3
TERMINAL_HOSTILE = ("\x1b", "\u202e", "\x00", "\r")


def _registered_commands() -> set[str]:
    parser = cli.build_parser()
    for action in parser._actions:  # argparse keeps subcommands here
        if isinstance(action, argparse._SubParsersAction):
            return set(action.choices)
    return set()


REGISTERED = _registered_commands()
COMMANDS = ALWAYS + tuple(c for c in OPTIONAL if c in REGISTERED)


@dataclasses.dataclass(frozen=True)
class Run:
    case: Case
    command: str
    code: int
    stdout: str
    stderr: str
    seconds: float
    output: Path
    new_in_case_dir: frozenset[str]
    new_in_cwd: frozenset[str]
    left_in_tmp: frozenset[str]

    @property
    def lines(self) -> list[str]:
        return [ln for ln in self.stderr.splitlines() if ln.strip()]


def _listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _args(command: str, case: Case, out_dir: Path) -> tuple[list[str], Path]:
    target = str(case.path)
    if command == "info":
        return [command, target], out_dir / "none"
    if command == "optimize":
        out = out_dir / "out.onnx"
        return [command, target, "-o", str(out)], out
    if command == "render":
        out = out_dir / "out.svg"
        return [command, target, "-o", str(out)], out
    out = out_dir / "bench.json"  # bench: the point is input handling, so measure briefly
    return [command, target, "--min-time", "0.05", "--max-rounds", "3", "--timeout", "60",
            "--json", str(out)], out


def _run_one(run_fusionviz, command: str, case: Case, work: Path) -> Run:
    base = work / f"{command}-{case.name}"
    out_dir, cwd, tmp = base / "out", base / "cwd", base / "tmp"
    for d in (out_dir, cwd, tmp):
        d.mkdir(parents=True)
    case_dir = case.path.parent if case.path.is_file() or not case.path.exists() else case.path
    before = _listing(case_dir)
    args, output = _args(command, case, out_dir)
    env = {"TMPDIR": str(tmp), **dict(case.env)}
    res = run_fusionviz(*args, timeout=BOUND_S[command] + 15, env=env, cwd=cwd, mem_limit=MEM_LIMIT,
                        fail_on_timeout=False)
    return Run(case, command, res.code, res.stdout, res.stderr, res.seconds, output,
               frozenset(_listing(case_dir) - before), frozenset(_listing(cwd)),
               frozenset(_listing(tmp)))


@pytest.fixture(scope="session")
def hostile_corpus(tmp_path_factory) -> dict[str, Case]:
    return build_corpus(tmp_path_factory.mktemp("hostile"))


@pytest.fixture(scope="session")
def hostile_runs(request, hostile_corpus, run_cli, tmp_path_factory):
    """``hostile_runs(command)`` -> {case name: Run}; each command's runs are made once, concurrently.

    Only the (command, case) pairs of selected tests are run (so ``-k`` stays cheap), plus the
    two cases the escaping test reads.
    """
    work = tmp_path_factory.mktemp("hostile_runs")
    wanted: dict[str, set[str]] = {c: {"names_with_markup", "names_10000_chars"} for c in COMMANDS}
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.name.startswith("test_hostile_input[") and "command" in params:
            wanted[params["command"]].add(params["case_name"])
    done: dict[str, dict[str, Run]] = {}

    def get(command: str) -> dict[str, Run]:
        if command not in done:
            with ThreadPoolExecutor(WORKERS) as pool:
                futures = {name: pool.submit(_run_one, run_cli, command, hostile_corpus[name], work)
                           for name in sorted(wanted[command])}
                done[command] = {name: f.result() for name, f in futures.items()}
        return done[command]

    yield get
    shutil.rmtree(work, ignore_errors=True)


def test_info_and_optimize_are_always_covered():
    # The optional-command guard must never make this file vacuous.
    assert set(ALWAYS) <= REGISTERED, f"CLI lacks {set(ALWAYS) - REGISTERED}"
    assert COMMANDS[:2] == ALWAYS
    assert len(CASE_NAMES) >= 40


def _describe(run: Run) -> str:
    return (f"{run.command} {run.case.name}: exit {run.code} in {run.seconds:.1f}s\n"
            f"stderr: {run.stderr[-2000:]!r}\nstdout: {run.stdout[-500:]!r}")


@pytest.mark.parametrize("case_name", CASE_NAMES)
@pytest.mark.parametrize("command", COMMANDS)
def test_hostile_input(command: str, case_name: str, hostile_runs):
    run = hostile_runs(command)[case_name]
    case = run.case
    why = _describe(run)
    # Nothing reaches a user as a traceback or an internal error, whatever the input.
    assert "Traceback" not in run.stderr, why
    assert "internal error" not in run.stderr, why
    assert run.code >= 0, f"killed by signal {-run.code}: " + why
    assert run.seconds < BOUND_S[command], f"took {run.seconds:.1f}s: " + why
    # Loading writes nothing next to the model, in the working directory or left in $TMPDIR.
    assert not run.new_in_case_dir, why
    assert not run.new_in_cwd, why
    # Allowed leftovers in $TMPDIR (the app's temp space): onnxruntime's own session-id file
    # ($TMPDIR/.ses, written whenever a session is made) and the benchmark queue's lock file.
    assert not (run.left_in_tmp - {".ses", "fusionviz-bench.lock"}), why
    for bad in TERMINAL_HOSTILE:
        assert bad not in run.stdout, f"raw {bad!r} on stdout: " + why
        # (onnxruntime colours its own log lines, so stderr is only checked where it is not used)
        if command == "info" or not case.valid:
            assert bad not in run.stderr, f"raw {bad!r} on stderr: " + why
    if not case.valid:
        assert run.code == 2, why
        lines = run.lines
        if command in ALWAYS:
            assert len(lines) == 1, why
            assert run.stdout == "", why
        assert lines and lines[-1].startswith("fusionviz: error: "), why
        reason = lines[-1].lower()
        assert any(word in reason for word in case.expect), f"expected one of {case.expect}: " + why
        assert not run.output.exists(), why
        return
    if command == "info":
        assert run.code == 0, why
        for word in ("inputs", "outputs", "ops ", "nodes", "params"):
            assert word in run.stdout, why
        return
    if command == "optimize":
        allowed = {0, 3} if case.runnable else {2}
    elif command == "render":
        allowed = {0, 2}  # 2: e.g. over the node limit for drawing
    else:  # bench: a variant onnxruntime cannot run is reported, or the run exits 2
        allowed = {0} if case.runnable else {0, 2}
    assert run.code in allowed, why
    if run.code:
        assert run.lines[-1].startswith("fusionviz: error: "), why
        return
    assert run.output.exists() and run.output.stat().st_size > 0, why
    if command == "render":
        drawn = run.output.read_text(errors="replace")
        assert "<script" not in drawn.lower(), "raw <script> in the SVG: " + why
        assert "\x1b" not in drawn and "\x00" not in drawn, why


@pytest.mark.parametrize("case_name", CASE_NAMES)
def test_hostile_input_in_process_loader(case_name, hostile_corpus, monkeypatch):
    # The same corpus straight through model_io (what the app calls): typed error or a model.
    case = hostile_corpus[case_name]
    for key, value in case.env:
        monkeypatch.setenv(key, value)
    if case.valid:
        loaded = model_io.load_path(case.path)
        assert loaded.proto.graph.node and len(loaded.sha256) == 64
        return
    with pytest.raises(errors.ModelLoadError) as info:
        model_io.load_path(case.path)
    text = str(info.value)
    assert "\n" not in text and text.isprintable(), text
    assert any(word in text.lower() for word in case.expect), (case.expect, text)


def test_escaped_names_survive_in_info_output(hostile_runs):
    # The markup case's names are printed escaped (visible), not dropped or raw.
    run = hostile_runs("info")["names_with_markup"]
    assert run.code == 0, _describe(run)
    assert "\\x1b[2J" in run.stdout and "\\u202e" in run.stdout and "\\n" in run.stdout
    assert '<script>alert("x")</script>' in run.stdout  # plain text in a terminal is fine
    long_run = hostile_runs("info")["names_10000_chars"]
    assert long_run.code == 0 and "...(+9800 chars)" in long_run.stdout
    assert max(len(ln) for ln in long_run.stdout.splitlines()) < 400
