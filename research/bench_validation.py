"""Load time of a large data-centre description: pydantic v2 vs msgspec vs jsonschema vs the
hand-written loader pydantic replaced, side by side in one run.

One JSON description of ``--servers`` servers (name, capacity, bridge, tunnel IP; each sends to
itself and to one other server) is written to a temporary file and loaded by:

- ``hand-written``: the loader before pydantic (``planner/datacentre.py`` at
  ``HANDWRITTEN_COMMIT``, read with ``git show``; skipped outside a git clone). It passed
  ``bridge`` and ``tunnel_ip`` through unchecked;
- ``pydantic``: today's ``DataCentre.load`` (file -> JSON -> models -> cross-field rules -> arrays),
  and its schema step alone (``Description``), from parsed JSON and straight from the bytes;
- ``msgspec`` and ``jsonschema``: the same schema (types, bounds, unknown keys, interface names,
  dotted-quad addresses) in each library, from the bytes (msgspec) or parsed JSON (jsonschema);
  their totals add the cross-field rules and arrays, which no library does (measured once on the
  pydantic models). jsonschema cannot reject NaN or Infinity (JSON Schema has no such keyword).

Each row is the best of ``--rounds`` runs (steps interleaved within a round, like ``timeit``'s
best-of). Whole loads (pydantic, hand-written) run in a fresh interpreter each, as ``cosample
plan`` does; the steps run in this process, and a library's total is the sum of its steps. The
ratio column compares like with like: fresh-process loads with pydantic's fresh-process load,
sums of steps with pydantic's sum of steps. Needs ``pip install msgspec jsonschema``
(the ``bench`` extra); a library that is missing is reported and skipped.

    python -m research.bench_validation [--servers 1000000] [--rounds 3] [--skip jsonschema]
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import TypeAdapter

from cosample.costmodel.paper import PAPER_ALPHA, PAPER_BETA
from cosample.experiments.bench_planner import random_datacentre
from cosample.planner.datacentre import DataCentre
from cosample.planner.description import Description
from research import ROOT

#: The last commit whose ``planner/datacentre.py`` validated by hand.
HANDWRITTEN_COMMIT = "1e56203b2080df9a254faf0dc37fbf20769badc2"
LOAD_TIMEOUT_S = 1800.0
IN_PROCESS_TOTAL = "total: parse + schema + cross-field rules and arrays"
REPOSITORY = ROOT
SCHEMA = TypeAdapter(Description)
IFNAME = r"^[^/:\s]{1,15}$"
IPV4 = r"^((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$"


def description(servers: int, seed: int = 0) -> dict[str, Any]:
    """A feasible description with agent fields on every server (``bench_planner``'s traffic)."""
    dc = random_datacentre(servers, seed=seed, peers=1)
    names = [f"host{i:07d}" for i in range(servers)]
    traffic: dict[str, dict[str, float]] = {}
    for src, dst, pps in zip(
        dc.traffic_src.tolist(), dc.traffic_dst.tolist(), dc.traffic_pps.tolist()
    ):
        row = traffic.setdefault(names[src], {})
        row[names[dst]] = row.get(names[dst], 0.0) + round(pps, 1)
    return {
        "name": "bench",
        "cost": {"alpha": PAPER_ALPHA, "beta": PAPER_BETA},
        "sflow": {"collector": "192.0.2.254:6343"},
        "servers": [
            {
                "name": name,
                "capacity_pps": round(float(capacity) + 1, 1),
                "bridge": "br-int",
                "tunnel_ip": f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}",
            }
            for i, (name, capacity) in enumerate(zip(names, dc.capacity_pps.tolist()))
        ],
        "traffic_pps": traffic,
    }


# the loaders ---------------------------------------------------------------------------------
def handwritten_loader() -> Callable[[Path], Any] | str:
    """``DataCentre.load`` as it was before pydantic, or why it is not available."""
    try:
        source = subprocess.run(
            ["git", "-C", str(REPOSITORY), "show", f"{HANDWRITTEN_COMMIT}:planner/datacentre.py"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"git show {HANDWRITTEN_COMMIT[:7]} failed ({exc})"
    module = types.ModuleType("cosample.planner._handwritten")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, "datacentre.py@" + HANDWRITTEN_COMMIT[:7], "exec"), module.__dict__)  # noqa: S102
    return module.DataCentre.load


def msgspec_loader() -> Callable[[bytes], Any] | str:
    """The description's schema as msgspec Structs, decoded straight from the bytes."""
    if importlib.util.find_spec("msgspec") is None:
        return "msgspec not installed (pip install msgspec)"
    import msgspec
    from msgspec import Meta, defstruct

    positive = Annotated[float, Meta(gt=0)]
    non_negative = Annotated[float, Meta(ge=0)]
    ifname = Annotated[str, Meta(pattern=IFNAME)]
    strict = {"forbid_unknown_fields": True}
    # defstruct, not class statements: this module's annotations are strings msgspec cannot
    # resolve inside a function
    cost = defstruct("Cost", [("alpha", positive), ("beta", positive)], **strict)
    server = defstruct(
        "Server",
        [
            ("name", Annotated[str, Meta(min_length=1)]),
            ("capacity_pps", non_negative | None, None),
            ("alpha", positive | None, None),
            ("beta", positive | None, None),
            ("calibration", str | None, None),
            ("tunnel_ip", Annotated[str, Meta(pattern=IPV4)] | None, None),
            ("bridge", ifname | None, None),
            ("vm_ports", list[ifname] | None, None),
        ],
        **strict,
    )
    sflow = defstruct(
        "Sflow",
        [
            ("collector", str | None, None),
            ("agent", str | None, None),
            ("header_bytes", Annotated[int, Meta(gt=0)] | None, None),
            ("polling_s", Annotated[int, Meta(ge=0)] | None, None),
        ],
        **strict,
    )
    document = defstruct(
        "Document",
        [
            ("cost", cost),
            ("servers", Annotated[list[server], Meta(min_length=1)]),
            ("name", str | None, None),
            ("traffic_pps", dict[str, dict[str, non_negative]], {}),
            ("sflow", sflow | None, None),
        ],
        **strict,
    )
    decoder = msgspec.json.Decoder(document)
    return decoder.decode


def jsonschema_loader() -> Callable[[Any], Any] | str:
    """The description's schema as JSON Schema (draft 2020-12), checked on parsed JSON."""
    if importlib.util.find_spec("jsonschema") is None:
        return "jsonschema not installed (pip install jsonschema)"
    import jsonschema

    positive = {"type": "number", "exclusiveMinimum": 0}
    non_negative = {"type": "number", "minimum": 0}
    ifname = {"type": "string", "pattern": IFNAME}
    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["cost", "servers"],
        "properties": {
            "name": {"type": "string", "minLength": 1},
            "cost": {
                "type": "object",
                "additionalProperties": False,
                "required": ["alpha", "beta"],
                "properties": {"alpha": positive, "beta": positive},
            },
            "servers": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string", "minLength": 1},
                        "capacity_pps": non_negative,
                        "alpha": positive,
                        "beta": positive,
                        "calibration": {"type": "string"},
                        "tunnel_ip": {"type": "string", "pattern": IPV4},
                        "bridge": ifname,
                        "vm_ports": {"type": "array", "items": ifname},
                    },
                },
            },
            "traffic_pps": {
                "type": "object",
                "additionalProperties": {"type": "object", "additionalProperties": non_negative},
            },
            "sflow": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "collector": {"type": "string"},
                    "agent": {"type": "string"},
                    "header_bytes": {"type": "integer", "exclusiveMinimum": 0},
                    "polling_s": {"type": "integer", "minimum": 0},
                },
            },
        },
    }
    validator = jsonschema.Draft202012Validator(schema)

    def check(document: Any) -> Any:
        validator.validate(document)
        return document

    return check


# measuring -----------------------------------------------------------------------------------
def timed(work: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = work()
    return time.perf_counter() - start, result


def measure(
    servers: int, rounds: int = 3, skip: Sequence[str] = ()
) -> list[tuple[str, str, float | None]]:
    """Rows ``(loader, what, best seconds over the rounds, or None when skipped)``.

    The steps run one after the other within each round, so a burst of load on the shared
    machine hits one round of every loader rather than all rounds of one.
    """
    with tempfile.TemporaryDirectory(prefix="cosample-bench-") as folder:
        path = Path(folder) / "datacentre.json"
        path.write_text(json.dumps(description(servers)))
        data = path.read_bytes()
        document = json.loads(data)
        model = SCHEMA.validate_python(document)
        DataCentre.from_dict(description(2))  # pydantic builds its validator on first use
        gc.collect()
        gc.freeze()  # the inputs above stay alive: keep the collector from re-scanning them in every step
        missing: dict[str, str] = {}
        steps: dict[tuple[str, str], Callable[[], Any]] = {
            ("pydantic", "total: file -> DataCentre (fresh process)"): lambda: load_elsewhere(
                "pydantic", path
            ),
            (
                "json.loads",
                "parse only (pydantic, jsonschema and hand-written start here)",
            ): lambda: json.loads(data),
            ("pydantic", "schema on parsed JSON"): lambda: SCHEMA.validate_python(document),
            ("pydantic", "schema from bytes (validate_json)"): lambda: SCHEMA.validate_json(data),
            ("(any library)", "cross-field rules + arrays"): lambda: DataCentre.from_description(
                model, path.parent, str(path)
            ),
        }
        for name, make, what, argument in (
            ("msgspec", msgspec_loader, "schema from bytes", data),
            ("jsonschema", jsonschema_loader, "schema on parsed JSON", document),
        ):
            loader = make() if name not in skip else "skipped (--skip)"
            if isinstance(loader, str):
                missing[name] = loader
            else:
                steps[(name, what)] = lambda loader=loader, argument=argument: loader(argument)
        handwritten = handwritten_loader() if "hand-written" not in skip else "skipped (--skip)"
        if isinstance(handwritten, str):
            missing["hand-written"] = handwritten
        else:
            steps[
                (
                    "hand-written",
                    f"total: file -> DataCentre (commit {HANDWRITTEN_COMMIT[:7]}, fresh process)",
                )
            ] = lambda: load_elsewhere("hand-written", path)
        best: dict[tuple[str, str], float] = {}
        for _ in range(rounds):
            for key, step in steps.items():
                seconds, result = timed(step)
                if isinstance(result, float):
                    seconds = result  # measured inside the fresh process
                del result
                best[key] = min(seconds, best.get(key, math.inf))
        gc.unfreeze()
    rows = [(loader, what, seconds) for (loader, what), seconds in best.items()]
    parse = best[("json.loads", "parse only (pydantic, jsonschema and hand-written start here)")]
    rest = best[("(any library)", "cross-field rules + arrays")]
    rows.append(
        ("pydantic", IN_PROCESS_TOTAL, parse + best[("pydantic", "schema on parsed JSON")] + rest)
    )
    if ("msgspec", "schema from bytes") in best:
        rows.append(
            (
                "msgspec",
                "total: parse and schema + cross-field rules and arrays",
                best[("msgspec", "schema from bytes")] + rest,
            )
        )
    if ("jsonschema", "schema on parsed JSON") in best:
        rows.append(
            (
                "jsonschema",
                IN_PROCESS_TOTAL,
                parse + best[("jsonschema", "schema on parsed JSON")] + rest,
            )
        )
    rows += [(name, why, None) for name, why in missing.items()]
    return rows


def load_elsewhere(loader: str, path: Path) -> float:
    """Seconds ``loader`` takes to load ``path`` in a fresh interpreter.

    A whole load is timed in a process of its own: in this one the inputs kept for the other
    steps (gigabytes at 10^6 servers) made each load about twice as slow as on its own.
    """
    argv = [sys.executable, "-m", "research.bench_validation", "--time-load", loader, str(path)]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=LOAD_TIMEOUT_S, check=False, cwd=ROOT
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.strip()[-300:]}")
    return float(done.stdout.split()[-1])


def time_load(loader: str, path: Path) -> float:
    """What ``--time-load`` runs: one whole load of ``path``, after a warm-up on a tiny file."""
    load = DataCentre.load if loader == "pydantic" else handwritten_loader()
    if isinstance(load, str):
        raise SystemExit(load)
    tiny = path.with_name("tiny.json")
    tiny.write_text(json.dumps(description(2)))
    load(tiny)  # imports, pydantic's validator
    seconds, dc = timed(lambda: load(path))
    assert dc.size > 0
    return seconds


def table(rows: list[tuple[str, str, float | None]]) -> str:
    """Markdown; each time also as a ratio to pydantic's total measured the same way (a fresh
    process, or the sum of the steps in this one)."""
    fresh = next(s for loader, what, s in rows if loader == "pydantic" and "fresh process" in what)
    here = next(s for loader, what, s in rows if loader == "pydantic" and what == IN_PROCESS_TOTAL)
    lines = [
        "| loader | what | seconds | / pydantic total, same kind of run |",
        "|---|---|---:|---:|",
    ]
    for loader, what, seconds in rows:
        shown = "—" if seconds is None else f"{seconds:.2f}"
        reference = fresh if "fresh process" in what else here
        ratio = "—" if seconds is None else f"{seconds / reference:.2f}"
        lines.append(f"| {loader} | {what} | {shown} | {ratio} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m research.bench_validation", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--servers", type=int, default=1_000_000, help="servers in the description")
    parser.add_argument("--time-load", nargs=2, metavar=("LOADER", "FILE"), help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=3, help="best of this many runs of each step")
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="LOADER",
        choices=("msgspec", "jsonschema", "hand-written"),
        help="leave a loader out",
    )
    args = parser.parse_args(argv)
    if args.time_load:
        print(f"{time_load(args.time_load[0], Path(args.time_load[1])):.6f}")
        return 0
    if args.servers < 2 or args.rounds < 1:
        parser.error("--servers: at least 2; --rounds: at least 1")
    rows = measure(args.servers, args.rounds, args.skip)
    print(
        f"{args.servers:,} servers, best of {args.rounds} rounds, Python {sys.version.split()[0]}, "
        f"load average {os.getloadavg()[0]:.1f} at the end"
    )
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
