"""Calibration designs side by side, in rounds, under a controlled background load.

Each ``--design NAME=ARGS`` is a set of extra ``cosample calibrate`` options (e.g.
``--offered-pps 40000`` or ``--duration 4 --phases 14``). In every one of ``--pairs`` rounds each
design calibrates ``--mechanism`` once, in a seeded random order, all with the round's seed
(``--seed`` + round), so the designs of a round meet the same trial order and, with
``--background bursty:N``, the same load pattern. A calibration is ``cosample calibrate
--testbed --method cpu --target-ci T --max-time S --warmup 3`` in a subprocess, with the
background load (``research/background.py``) started just before it and stopped right after;
``--lock`` holds an exclusive lock around each calibration only, so others take turns between
them. Every calibration prints one Markdown row as it ends (a failed one says why); a summary
per design follows.

    python -m research.costmodel_sidebyside --mechanism mirror_vxlan \\
        --design "2s=--duration 2 --phases 8" --design "4s=--duration 4 --phases 14" \\
        --pairs 4 --seed 50 --background bursty:1 --lock /tmp/cosample-ovs.lock --out-dir out/sbs

Exit status: 0 when every calibration succeeded, 1 when one failed, 2 on bad options, 130 when
interrupted (the running calibration and the background load are stopped by PID).
"""

from __future__ import annotations

import argparse
import datetime
import fcntl
import math
import os
import random
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cosample.costmodel.trials import MECHANISMS
from cosample.errors import CosampleError, exit_status
from cosample.experiments.errors import ExperimentError
from research.background import Background, BackgroundLoad

#: Seconds a calibration may take beyond ``--max-time`` (testbed, warm-up, fit, removal).
MARGIN_S = 180.0
#: Seconds a calibration stopped by SIGTERM gets to remove its testbed before it is killed.
CLEANUP_S = 60.0
WARMUP_S = 3.0
COLUMNS = (
    "design",
    "seed",
    "started (UTC)",
    "load",
    "background",
    "runs",
    "seconds",
    "a",
    "95% CI",
    "half-width",
    "needed",
    "met",
    "host busy (CPUs)",
    "c0 (ns/packet)",
)


class Design(BaseModel):
    """A named set of extra ``cosample calibrate`` options."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._+]*$", max_length=40)
    args: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> Design:
        """``NAME=ARGS`` (ARGS split as a shell would), or ``NAME`` alone: calibrate's defaults."""
        name, equals, options = text.partition("=")
        try:
            return cls(name=name, args=tuple(shlex.split(options)) if equals else ())
        except (ValueError, ValidationError):
            raise argparse.ArgumentTypeError(
                f"design {text!r}: expected NAME=ARGS, NAME letters, digits, '.', '_' or '+' "
                f"(it is part of file names), ARGS options of cosample calibrate"
            ) from None


class _Refusing(argparse.ArgumentParser):
    def error(self, message: str):
        raise ExperimentError(message)


class _Given(argparse.Namespace):
    """Claims every public attribute, so argparse stores only the options actually given."""

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return None


def options_given(argv: list[str]) -> set[str]:
    """The ``cosample calibrate`` options (their ``dest``) that ``argv`` sets, however spelled
    (abbreviated, ``--x=1``, ``-d1``); an ExperimentError for what calibrate would refuse."""
    from cosample.costmodel.cli import register

    commands = _Refusing(prog="cosample").add_subparsers(parser_class=_Refusing)
    register(commands)
    namespace = _Given()
    try:
        commands.choices["calibrate"].parse_args(argv, namespace)
    except SystemExit:  # --help
        raise ExperimentError(f"{shlex.join(argv)}: not calibration options") from None
    return set(vars(namespace))


def calibrate_argv(args: argparse.Namespace, design: Design, seed: int) -> list[str]:
    """The command of one calibration: the experiment's fixed options, then the design's."""
    csv, output = output_paths(args.out_dir, args.mechanism, design.name, seed)
    return [
        sys.executable,
        "-m",
        "cosample",
        "calibrate",
        "--testbed",
        "--prefix",
        args.prefix,
        "--method",
        "cpu",
        "--mechanisms",
        args.mechanism,
        "--target-ci",
        f"{args.target_ci:g}",
        "--max-time",
        f"{args.max_time:g}",
        "--warmup",
        f"{WARMUP_S:g}",
        "--seed",
        str(seed),
        "--no-progress",
        "-d",
        str(csv),
        "-o",
        str(output),
        *design.args,
    ]


def check_designs(args: argparse.Namespace) -> None:
    """Names unique; no design sets an option the experiment sets (or one calibrate refuses)."""
    names = [design.name for design in args.design]
    if len(set(names)) != len(names):
        raise ExperimentError(f"--design names must differ, got {', '.join(names)}")
    fixed = options_given(calibrate_argv(args, Design(name="x", args=()), 0)[4:])
    for design in args.design:
        try:
            clash = options_given(list(design.args)) & fixed
        except ExperimentError as exc:
            raise ExperimentError(f"--design {design.name}: {exc}") from None
        if clash:
            raise ExperimentError(
                f"--design {design.name}: {', '.join(_option(d) for d in sorted(clash))} is set "
                f"by the experiment; a design may not set any of "
                f"{', '.join(_option(d) for d in sorted(fixed))}"
            )


def _option(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def round_orders(names: list[str], pairs: int, seed: int) -> list[list[str]]:
    """The order the designs run in, per round: a seeded shuffle of all of them each round."""
    rng = random.Random(seed)
    return [rng.sample(names, len(names)) for _ in range(pairs)]


def output_paths(out_dir: Path, mechanism: str, design: str, seed: int) -> tuple[Path, Path]:
    stem = out_dir / f"{mechanism}-{design}-s{seed}"
    return stem.with_suffix(".csv"), stem.with_suffix(".json")


def planned_files(args: argparse.Namespace) -> list[Path]:
    return [
        path
        for design in args.design
        for seed in range(args.seed, args.seed + args.pairs)
        for path in output_paths(args.out_dir, args.mechanism, design.name, seed)
    ]


@dataclass
class Outcome:
    """One calibration as it ran: when, beside what, and why it failed (None: it did not)."""

    design: str
    seed: int
    started: str
    load: float
    background: str
    output: Path
    error: str | None = None
    background_pids: list[int] = field(default_factory=list)


def result_row(outcome: Outcome, mechanism: str) -> dict:
    """The table's row of one calibration, from the JSON and CSV it wrote (``compare``)."""
    from cosample.costmodel.compare import summary_rows

    row = {
        "design": outcome.design,
        "seed": outcome.seed,
        "started": outcome.started,
        "load": outcome.load,
        "background": outcome.background,
        "error": outcome.error,
    }
    if outcome.error is not None:
        return row
    try:
        found = summary_rows([str(outcome.output)])
    except CosampleError as exc:
        return {**row, "error": f"results unreadable: {exc}"}
    found = found[found["mechanism"] == mechanism]
    if found.empty:
        return {**row, "error": f"{outcome.output.name} has no {mechanism}"}
    return {**found.iloc[0].to_dict(), **row}


def markdown_row(row: dict) -> str:
    head = [
        row["design"],
        str(row["seed"]),
        row["started"],
        f"{row['load']:.2f}",
        row["background"],
    ]
    if row["error"] is not None:
        cells = head + [f"failed: {row['error']}".replace("|", "/")] + ["-"] * (len(COLUMNS) - 6)
    else:
        cells = head + [
            str(row["runs"]),
            _number(row["seconds"], ".1f"),
            f"{row['a']:.3f}",
            f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}]",
            f"{row['half_width']:.3f}",
            _number(row["needed"], ".3f"),
            "-" if row["target_met"] is None else "yes" if row["target_met"] else "no",
            _number(row["host_busy"], ".2f"),
            _number(row["c0_ns"], ",.0f"),
        ]
    return "| " + " | ".join(cells) + " |"


def _number(value, spec: str) -> str:
    return "-" if value is None or not math.isfinite(value) else format(value, spec)


def header() -> str:
    return "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS)


def summary(rows: list[dict]) -> str:
    """Per design: calibrations, failed, met, median half-width / needed, median seconds."""
    lines = [
        "| design | calibrations | failed | met | median half-width / needed | median seconds |",
        "|---|---|---|---|---|---|",
    ]
    frame = pd.DataFrame(rows)
    for design, group in frame.groupby("design", sort=False):
        done = group[group["error"].isna()]
        ratio = (done["half_width"] / done["needed"]).median() if not done.empty else math.nan
        seconds = done["seconds"].astype(float).median() if not done.empty else math.nan
        met = sum(1 for value in done.get("target_met", ()) if value is not None and bool(value))
        lines.append(
            f"| {design} | {len(group)} | {len(group) - len(done)} | {met} | "
            f"{_number(ratio, '.2f')} | {_number(seconds, '.1f')} |"
        )
    return "\n".join(lines)


@contextmanager
def held(path: Path | None, say: Callable[[str], None]) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (the one ``flock(1)`` takes) while inside."""
    if path is None:
        yield
        return
    try:
        handle = open(path, "a")
    except OSError as exc:
        raise ExperimentError(f"--lock {path}: cannot open: {exc.strerror}") from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for the lock {path}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_calibration(argv: list[str], timeout_s: float) -> str | None:
    """Run one calibration; None when it succeeded, else why not (its stderr is shown).

    It runs in a session of its own, so Ctrl-C reaches only this process, which then stops
    it by PID with one SIGTERM (calibrate removes its testbed on SIGTERM)."""
    process = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _stop(process)
        return f"timed out after {timeout_s:g} s"
    except BaseException:
        _stop(process)
        raise
    if process.returncode == 0:
        return None
    sys.stderr.write(
        f"calibration failed (exit {process.returncode}): {shlex.join(argv)}\n{stderr}"
    )
    last = [line for line in stderr.splitlines() if line.strip()]
    return f"exit {process.returncode}" + (f": {last[-1].strip()}" if last else "")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.communicate(timeout=CLEANUP_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()


def run(args: argparse.Namespace, out: Callable[[str], None] = print) -> list[dict]:
    """Every calibration of every round, a row printed as each ends; the rows."""
    timeout_s = args.max_time + MARGIN_S
    rows = []
    out(header())
    for index, order in enumerate(
        round_orders([d.name for d in args.design], args.pairs, args.seed)
    ):
        seed = args.seed + index
        for name in order:
            design = next(d for d in args.design if d.name == name)
            with held(args.lock, lambda line: print(line, file=sys.stderr, flush=True)):
                outcome = Outcome(
                    design=name,
                    seed=seed,
                    output=output_paths(args.out_dir, args.mechanism, name, seed)[1],
                    started=datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M"),
                    load=os.getloadavg()[0],
                    background=str(args.background),
                )
                with BackgroundLoad(args.background, seed, timeout_s + 10) as load:
                    outcome.background_pids = load.pids
                    outcome.error = run_calibration(calibrate_argv(args, design, seed), timeout_s)
            rows.append({**result_row(outcome, args.mechanism), "outcome": outcome})
            out(markdown_row(rows[-1]))
    out("")
    out(summary(rows))
    return rows


def build_parser() -> argparse.ArgumentParser:
    from cosample.experiments.cli import DEFAULT_OUT

    parser = argparse.ArgumentParser(
        prog="python -m research.costmodel_sidebyside", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--mechanism", choices=MECHANISMS, required=True)
    parser.add_argument(
        "--design",
        type=Design.parse,
        action="append",
        required=True,
        metavar="NAME=ARGS",
        help="extra cosample calibrate options (repeat)",
    )
    parser.add_argument(
        "--pairs",
        type=int,
        default=1,
        help="rounds; each design calibrates once per round (default 1)",
    )
    parser.add_argument("--seed", type=int, default=0, help="round i uses seed SEED+i")
    parser.add_argument("--target-ci", type=float, default=0.1)
    parser.add_argument("--max-time", type=float, default=120.0)
    parser.add_argument("--prefix", default="sb", help="testbed prefix (default sb)")
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=DEFAULT_OUT,
        help="where each calibration's CSV and JSON go (default out/)",
    )
    parser.add_argument("--force", action="store_true", help="overwrite existing results")
    parser.add_argument(
        "--lock",
        type=Path,
        help="hold an exclusive flock on this file around each calibration "
        "(here: /tmp/cosample-ovs.lock; do not also wrap the command in "
        "flock on the same file)",
    )
    parser.add_argument(
        "--background",
        type=_background,
        default=Background(kind="none"),
        metavar="none|hog:N|bursty:N",
        help="CPU load beside each calibration (default none)",
    )
    return parser


def _background(text: str) -> Background:
    try:
        return Background.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def check(args: argparse.Namespace) -> None:
    """Everything that can be refused before the first calibration."""
    from cosample.costmodel.adaptive import Target

    if args.pairs < 1:
        raise ExperimentError(f"--pairs must be >= 1, got {args.pairs}")
    Target(relative=args.target_ci, max_time_s=args.max_time)  # its own range checks
    check_designs(args)
    existing = [str(path) for path in planned_files(args) if path.exists()]
    if existing and not args.force:
        raise ExperimentError(
            f"{existing[0]} exists ({len(existing)} of the results would be "
            f"overwritten); choose another --out-dir or --seed, or --force"
        )
    if not args.out_dir.is_dir():
        from cosample.experiments.files import output_dir

        output_dir(args.out_dir)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def terminate(signum, frame):  # SIGTERM stops like Ctrl-C
        raise KeyboardInterrupt

    def side_by_side() -> int:
        check(args)
        rows = run(args, out=lambda line: print(line, flush=True))
        return 1 if any(row["error"] is not None for row in rows) else 0

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        return exit_status("costmodel_sidebyside", side_by_side)
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
