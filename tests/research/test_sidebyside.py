"""The side-by-side experiment: its options and refusals, round order, background load, rows
built from a committed calibration, and (root, OVS, iperf3) one real round."""

from __future__ import annotations

import fcntl
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from costmodel_leftovers import leftovers
from waiting import interrupt, wait_for

from cosample.costmodel.onehost import one_host_testbed_unavailable
from research import costmodel_sidebyside as sbs
from research.background import (
    BURSTY_BUSY_S,
    BURSTY_IDLE_S,
    Background,
    BackgroundLoad,
    bursty_schedule,
    work,
    worker_argv,
)

DOCS = Path(__file__).resolve().parents[2] / "docs"
PREFIX = "sbt"


def parse(*extra: str, out_dir: Path = Path("unused")) -> object:
    return sbs.build_parser().parse_args(
        ["--mechanism", "mirror", "--out-dir", str(out_dir), *extra]
    )


def test_designs_parse_with_shell_quoting_and_a_bare_name_means_the_defaults():
    design = sbs.Design.parse("4s=--duration 4 --phases 14 --covariate 'mirror=none'")
    assert design.name == "4s" and design.args == (
        "--duration",
        "4",
        "--phases",
        "14",
        "--covariate",
        "mirror=none",
    )
    assert sbs.Design.parse("default").args == ()
    args = parse("--design", "a=--offered-pps 40000", "--design", "b")
    assert [d.name for d in args.design] == ["a", "b"]
    assert args.target_ci == 0.1 and args.max_time == 120 and args.prefix == "sb"
    assert str(args.background) == "none" and args.lock is None


@pytest.mark.parametrize(
    "text", ["a b=--duration 2", "x/y=--duration 2", "=--duration 2", "q=--duration '2"]
)
def test_bad_design_names_and_quoting_are_refused(text, capsys):
    with pytest.raises(SystemExit):
        parse("--design", text)
    assert "NAME=ARGS" in capsys.readouterr().err


@pytest.mark.parametrize(
    "options, named",
    [
        ("-d x.csv", "--data"),
        ("--data=x.csv", "--data"),
        ("-ox.json", "--output"),
        ("--seed 3", "--seed"),
        ("--mech sflow", "--mechanisms"),
        ("--testbed", "--testbed"),
        ("--max-time 30", "--max-time"),
        ("--target-ci=0.2", "--target-ci"),
        ("--no-prog", "--no-progress"),
        ("--prefix zz", "--prefix"),
        ("--warmup 0", "--warmup"),
        ("--method throughput", "--method"),
    ],
)
def test_a_design_may_not_set_what_the_experiment_sets(options, named, tmp_path, capsys):
    out_dir = tmp_path / "out"
    code = sbs.main(
        [
            "--mechanism",
            "mirror",
            "--design",
            "ok=--duration 4 --phases 14",
            "--design",
            f"bad=--offered-pps 30000 {options}",
            "--out-dir",
            str(out_dir),
        ]
    )
    assert code == 2
    error = capsys.readouterr().err
    assert f"--design bad: {named} is set by the experiment" in error
    assert not out_dir.exists()  # refused before anything was made


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--design", "a=--bogus 1"], "--design a: unrecognized arguments: --bogus"),
        (["--design", "a=--duration x"], "--design a: argument --duration: invalid float"),
        (["--design", "a=--help"], "--design a: --help: not calibration options"),
        (["--design", "a", "--design", "a=--duration 2"], "names must differ"),
        (["--design", "a", "--pairs", "0"], "--pairs must be >= 1"),
        (["--design", "a", "--max-time", "5"], "max time must be 10 s to 24 h"),
        (["--design", "a", "--target-ci", "0"], "relative must be in (0, 10)"),
    ],
)
def test_bad_settings_are_refused_with_one_clear_error(extra, message, tmp_path, capsys):
    assert sbs.main(["--mechanism", "sflow", "--out-dir", str(tmp_path), *extra]) == 2
    assert message in capsys.readouterr().err


def test_existing_results_are_not_overwritten_without_force(tmp_path, capsys):
    (tmp_path / "mirror-b-s8.json").write_text("{}")
    argv = [
        "--mechanism",
        "mirror",
        "--design",
        "a",
        "--design",
        "b",
        "--seed",
        "7",
        "--pairs",
        "2",
        "--out-dir",
        str(tmp_path),
    ]
    assert sbs.main(argv) == 2
    assert "mirror-b-s8.json exists" in capsys.readouterr().err
    args = sbs.build_parser().parse_args([*argv, "--force"])
    sbs.check(args)  # accepted
    assert {p.name for p in sbs.planned_files(args)} == {
        f"mirror-{d}-s{s}.{e}" for d in "ab" for s in (7, 8) for e in ("csv", "json")
    }


def test_the_calibration_command_appends_the_design_to_the_fixed_options(tmp_path):
    args = parse(
        "--design",
        "40k=--offered-pps 40000",
        "--prefix",
        "zz",
        "--max-time",
        "60",
        out_dir=tmp_path,
    )
    argv = sbs.calibrate_argv(args, args.design[0], 12)
    assert argv[:4] == [sys.executable, "-m", "cosample", "calibrate"]
    assert argv[-2:] == ["--offered-pps", "40000"]
    text = " ".join(argv)
    for part in (
        "--testbed --prefix zz --method cpu --mechanisms mirror --target-ci 0.1 "
        "--max-time 60 --warmup 3 --seed 12 --no-progress",
        f"-d {tmp_path}/mirror-40k-s12.csv -o {tmp_path}/mirror-40k-s12.json",
    ):
        assert part in text


def test_every_round_runs_every_design_once_in_a_seeded_order():
    names = ["a", "b", "c"]
    orders = sbs.round_orders(names, 20, seed=5)
    assert len(orders) == 20 and all(sorted(order) == names for order in orders)
    assert orders == sbs.round_orders(names, 20, seed=5)
    assert orders != sbs.round_orders(names, 20, seed=6)
    assert len({tuple(order) for order in orders}) > 1  # not one fixed order


@pytest.mark.parametrize(
    "text, kind, processes", [("none", "none", 0), ("hog:2", "hog", 2), ("bursty:1", "bursty", 1)]
)
def test_background_specs(text, kind, processes):
    spec = Background.parse(text)
    assert (spec.kind, spec.processes, str(spec)) == (kind, processes, text)


@pytest.mark.parametrize("text", ["hog", "hog:0", "none:2", "bursty:x", "spin:2", "hog:65"])
def test_bad_background_specs_are_refused(text, capsys):
    with pytest.raises(SystemExit):
        parse("--design", "a", "--background", text)
    assert "expected none, hog:N or bursty:N" in capsys.readouterr().err


def test_bursty_schedule_is_bounded_seeded_and_covers_the_time():
    schedule = bursty_schedule("3/0", 300.0)
    assert all(
        BURSTY_BUSY_S[0] <= busy <= BURSTY_BUSY_S[1]
        and BURSTY_IDLE_S[0] <= idle <= BURSTY_IDLE_S[1]
        for busy, idle in schedule
    )
    total = sum(busy + idle for busy, idle in schedule)
    assert 300.0 <= total <= 300.0 + BURSTY_BUSY_S[1] + BURSTY_IDLE_S[1]
    assert schedule == bursty_schedule("3/0", 300.0)
    assert schedule != bursty_schedule("3/1", 300.0)
    busy = [b for b, _ in schedule]
    assert max(busy) - min(busy) > 2  # drawn, not constant


def test_each_background_process_is_told_its_deadline_and_pattern():
    hog, bursty = Background.parse("hog:2"), Background.parse("bursty:2")
    assert worker_argv(hog, 4, 1, 310)[-2:] == ["--seconds", "310"]
    assert worker_argv(bursty, 4, 1, 310)[-4:] == ["--seconds", "310", "--bursty", "4/1"]


class FakeClock:
    """Time that passes only when looked at (a busy loop) or slept."""

    def __init__(self) -> None:
        self.now, self.sleeps = 0.0, []

    def clock(self) -> float:
        self.now += 0.01
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 2))
        self.now += seconds


def test_a_worker_follows_its_schedule_and_stops_at_its_deadline():
    clock = FakeClock()
    work([(1.0, 2.0), (1.0, 2.0)], 100.0, clock.clock, clock.sleep)
    assert clock.sleeps == [2.0, 2.0] and clock.now == pytest.approx(6.0, abs=0.1)
    clock = FakeClock()
    work([(1.0, 2.0), (1.0, 2.0)], 2.5, clock.clock, clock.sleep)  # ends in the first idle
    assert clock.sleeps == [pytest.approx(1.5, abs=0.05)] and clock.now < 2.6
    clock = FakeClock()
    work([(50.0, 0.0)], 3.0, clock.clock, clock.sleep)  # a hog: busy to the deadline
    assert clock.sleeps == [] and 3.0 <= clock.now < 3.1


def test_background_processes_end_by_themselves_and_are_stopped_by_pid():
    with BackgroundLoad(Background.parse("hog:1"), 0, 1.0) as short:
        process = short.processes[0]
        process.wait(timeout=30)  # ended at its deadline, nobody killed it
        assert process.returncode == 0
    with BackgroundLoad(Background.parse("bursty:2"), 0, 600.0) as long:
        assert all(p.poll() is None for p in long.processes)
    assert [p.returncode for p in long.processes] == [-signal.SIGKILL] * 2


def test_the_lock_is_exclusive_while_held(tmp_path):
    path = tmp_path / "lock"
    with sbs.held(path, print):
        with open(path) as other, pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(path) as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_a_failed_or_hung_calibration_is_a_reason_not_a_crash(capsys):
    fail = [
        sys.executable,
        "-c",
        "import sys; print('cosample: error: no OVS', file=sys.stderr); sys.exit(2)",
    ]
    assert sbs.run_calibration(fail, 30) == "exit 2: cosample: error: no OVS"
    assert "no OVS" in capsys.readouterr().err  # its stderr is shown
    hang = [sys.executable, "-c", "import time; time.sleep(60)"]
    assert sbs.run_calibration(hang, 0.5) == "timed out after 0.5 s"


def row_of_committed_calibration() -> dict:
    outcome = sbs.Outcome(
        design="12s",
        seed=3,
        started="11:55",
        load=3.76,
        background="none",
        output=DOCS / "data" / "cpu-mirror.json",
    )
    return sbs.result_row(outcome, "mirror")


def test_a_row_from_a_committed_calibration_agrees_with_the_docs_table():
    row = row_of_committed_calibration()
    data = pd.read_csv(DOCS / "data" / "cpu-mirror.csv")
    line = sbs.markdown_row(row)
    assert line.startswith(
        "| 12s | 3 | 11:55 | 3.76 | none | 6 | 76.2 | 0.044 | [0.034, 0.053] "
        "| 0.009 | 0.020 | yes | "
    )
    assert line.endswith(f" | {data['cpu_host_busy'].mean():.2f} | 25,573 |")
    # the same c0 and interval as the hand-made table in docs/notes/costmodel-journal.md
    assert re.search(
        r"\| mirror \| cpu \| 11:55, 3.8 \| receiver \| 0.044 \| \[0.034, 0.053\] "
        r"\|.*\| 25,573 \|",
        (DOCS / "notes" / "costmodel-journal.md").read_text(),
    )
    assert len(line.split("|")) == len(sbs.COLUMNS) + 2


def test_failed_rows_and_the_summary_per_design():
    good = row_of_committed_calibration()
    failed = sbs.result_row(
        sbs.Outcome(
            design="4s",
            seed=3,
            started="12:00",
            load=1.0,
            background="hog:1",
            output=Path("missing.json"),
            error="exit 2: a | b",
        ),
        "mirror",
    )
    unreadable = sbs.result_row(
        sbs.Outcome(
            design="4s",
            seed=4,
            started="12:05",
            load=1.0,
            background="hog:1",
            output=Path("missing.json"),
        ),
        "mirror",
    )
    assert sbs.markdown_row(failed).startswith(
        "| 4s | 3 | 12:00 | 1.00 | hog:1 | failed: exit 2: a / b | - |"
    )
    assert "results unreadable: missing.json" in unreadable["error"]
    table = sbs.summary(
        [
            good,
            failed,
            unreadable,
            {**good, "seed": 4, "half_width": 0.03, "target_met": False, "seconds": 100.0},
        ]
    )
    assert "| 12s | 2 | 0 | 1 | 0.98 | 88.1 |" in table  # (0.009/0.020 + 0.030/0.020) / 2
    assert "| 4s | 2 | 2 | 0 | - | - |" in table


REASON = one_host_testbed_unavailable()


def alive(pid: int) -> bool:
    """The PID is still one of our background workers (a reused PID is someone else)."""
    try:
        return "research.background" in Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return False


@pytest.mark.root
@pytest.mark.ovs
@pytest.mark.slow
@pytest.mark.skipif(REASON is not None, reason=f"real side-by-side run: {REASON}")
def test_one_real_round_of_two_designs_under_a_hog(tmp_path, capsys):
    args = sbs.build_parser().parse_args(
        [
            "--mechanism",
            "mirror",
            "--design",
            "2s=--duration 2 --phases 4",
            "--design",
            "3s=--duration 3 --phases 6",
            "--pairs",
            "1",
            "--seed",
            "5",
            "--max-time",
            "10",
            "--background",
            "hog:1",
            "--prefix",
            PREFIX,
            "--lock",
            str(tmp_path / "lock"),
            "--out-dir",
            str(tmp_path / "out"),
        ]
    )
    sbs.check(args)
    rows = sbs.run(args)
    assert [row["error"] for row in rows] == [None, None], capsys.readouterr().err
    assert sorted(row["design"] for row in rows) == ["2s", "3s"]
    assert {row["seed"] for row in rows} == {5}
    for row in rows:
        assert row["runs"] >= 1 and row["c0_ns"] > 0 and row["host_busy"] > 0
        assert row["needed"] == pytest.approx(max(0.1 * abs(row["a"]), 0.02))
        pids = row["outcome"].background_pids
        assert len(pids) == 1 and not any(alive(pid) for pid in pids)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "mirror-2s-s5.csv",
        "mirror-2s-s5.json",
        "mirror-3s-s5.csv",
        "mirror-3s-s5.json",
    ]
    printed = capsys.readouterr().out
    assert printed.count("| hog:1 |") == 2
    assert "| 2s | 1 | 0 | " in printed and "| 3s | 1 | 0 | " in printed  # the summary
    assert leftovers(PREFIX) == []


@pytest.mark.root
@pytest.mark.ovs
@pytest.mark.slow
@pytest.mark.skipif(REASON is not None, reason=f"real side-by-side run: {REASON}")
def test_sigterm_stops_the_calibration_and_the_background_by_pid(tmp_path):
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "research.costmodel_sidebyside",
            "--mechanism",
            "mirror",
            "--design",
            "long=--duration 3 --phases 6",
            "--max-time",
            "60",
            "--background",
            "hog:2",
            "--prefix",
            PREFIX,
            "--out-dir",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        workers = wait_for(
            lambda: len(found := background_workers(process.pid)) == 2 and found, timeout_s=30
        )
        time.sleep(4)  # into the calibration's testbed
    finally:
        stderr = interrupt(process, signal.SIGTERM, timeout_s=90)
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr
    assert not any(alive(pid) for pid in workers)
    assert leftovers(PREFIX) == [] and list(tmp_path.iterdir()) == []


def background_workers(parent: int) -> list[int]:
    """PIDs of the background workers ``parent`` started."""

    def parent_of(pid: int) -> int | None:
        try:
            return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return None

    return [
        int(pid)
        for pid in os.listdir("/proc")
        if pid.isdigit() and alive(int(pid)) and parent_of(int(pid)) == parent
    ]
