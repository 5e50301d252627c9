"""Which analyser processes this host should run, and what to start or stop (pure).

The plan's ``appmon`` entries ask an analyser of a host (``appmon_state.analyser_spec``, one
item per service): the on-site sniffer of its own service, the off-site sniffer that sends
compact records (``send_records``), the receiver of another host's records
(``receive_records``), or the analyser of the copies another host mirrors here (the receive
tunnel device). Each item is one ``cosample appmon run`` process with its own state directory;
``wanted_analysers`` writes its argument list. ``supervise`` compares what is wanted with the
children the supervisor knows and returns commands: stop (by PID; SIGTERM, then SIGKILL after a
timeout) what is no longer wanted or whose argument list changed, start what is wanted and not
running, restart what exited once its back-off has passed. ``exited`` records an exit and the
back-off: doubling per early exit, reset after a run of ``STABLE_S``. The effects are
``analyser_procs.Supervisor``'s.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from cosample.agents.commands import Command
from cosample.agents.state import short_hash
from cosample.dataplane.recordkeys import pair_key
from cosample.plan.appmon import SHARE_BITS

#: Folder of the analysers' state directories, inside the agent's state directory (0700).
ANALYSERS_DIR = "analysers"
#: A child that ran this long before exiting was not failing: its back-off starts again.
STABLE_S = 60.0
#: The pair key's file in an analyser's state directory (its name carries a hash of the key,
#: so a new secret changes the argument list and restarts the pair).
RECORD_KEY_FILE = "record-{}.key"


@dataclass(frozen=True)
class WantedAnalyser:
    name: str  # stable: role and a hash of what it analyses; its state directory's name
    role: str  # sniffer | sender | receiver | mirror
    service: str
    argv: tuple[str, ...]
    state_dir: str
    #: the compact records' pair key (sender and receiver): written to ``RECORD_KEY_FILE`` in
    #: ``state_dir`` (0600) before the process starts; None: no records, or insecure ones
    record_key: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Child:
    """An analyser the supervisor started (or adopted): running (``pid``) or exited."""

    name: str
    argv: tuple[str, ...]
    state_dir: str
    pid: int | None
    started_at: float
    exit_code: int | None = None
    failures: int = 0  # early exits in a row
    restarts: int = 0
    retry_at: float = 0.0


@dataclass(frozen=True)
class StartAnalyser(Command):
    analyser: WantedAnalyser
    restart: bool = False

    def describe(self) -> str:
        a = self.analyser
        return f"{'restart' if self.restart else 'start'} analyser {a.name} ({a.role} {a.service})"


@dataclass(frozen=True)
class StopAnalyser(Command):
    name: str
    pid: int
    why: str

    def describe(self) -> str:
        return f"stop analyser {self.name} (pid {self.pid}: {self.why})"


def role(item: dict) -> str:
    if item.get("receive_records"):
        return "receiver"
    if item.get("send_records"):
        return "sender"
    return "mirror" if item.get("mechanism") != "sniffer" else "sniffer"


def analyser_name(kind: str, sender: str | None, service: str, interface: str | None) -> str:
    """The stable name (and state directory) of the analyser of ``service`` (``addr:port``)
    in ``kind`` for ``sender``'s traffic, read from ``interface``."""
    return f"{kind}-{short_hash(json.dumps([kind, sender, service, interface]))}"


def wanted_analysers(
    spec: tuple[dict, ...],
    *,
    host: str,
    state_dir: str | Path,
    window_s: float,
    snapshot_key: str | None = None,
    record_secret: bytes | None = None,
    insecure_records: bool = False,
    python: str = sys.executable,
) -> dict[str, WantedAnalyser]:
    """One ``appmon run`` per spec item, by name. A sender or receiver of compact records
    gets its pair's key (``records.pair_key`` of ``record_secret``; with neither a secret nor
    ``insecure_records`` the process refuses to start and its log says why)."""
    wanted = {}
    root = Path(state_dir) / ANALYSERS_DIR
    for item in spec:
        kind = role(item)
        svc = item["service"]
        address = svc["address"]
        service = f"[{address}]:{svc['port']}" if ":" in address else f"{address}:{svc['port']}"
        name = analyser_name(kind, item.get("from"), service, item.get("interface"))
        directory = str(root / name)
        residues = round(float(item.get("share") or 1.0) * (1 << SHARE_BITS))
        argv = [python, "-m", "cosample", "appmon", "run"]
        if item.get("interface"):
            argv += ["--interface", item["interface"]]
        if item.get("send_records"):
            argv += ["--send-records", item["send_records"]]
        if item.get("receive_records"):
            argv += ["--receive-records", item["receive_records"]]
        key = None
        if item.get("send_records") or item.get("receive_records"):
            pair = (host, item["send_to"]) if item.get("send_records") else (item["from"], host)
            if record_secret is not None:
                key = pair_key(record_secret, *pair)
                file = RECORD_KEY_FILE.format(short_hash(key.hex()))
                argv += ["--record-key", str(Path(directory) / file)]
            elif insecure_records:
                argv += ["--insecure-records"]
        if item.get("send_records_from"):
            argv += ["--send-records-from", item["send_records_from"]]
        if item.get("records_from"):
            argv += ["--records-from", item["records_from"]]
        if residues < 1 << SHARE_BITS:
            argv += ["--share-residues", str(max(1, residues))]
        if svc.get("protocol", "http") != "http":  # HTTP/1.x is what it reads undeclared
            argv += ["--protocol", f"{svc['port']}={svc['protocol']}"]
        argv += [
            "--port",
            str(svc["port"]),
            "--window",
            f"{window_s:g}s",
            "--name",
            f"{host}/{kind}/{service}",
            "--state-dir",
            directory,
        ]
        if snapshot_key:
            argv += ["--snapshot-key", snapshot_key]
        wanted[name] = WantedAnalyser(name, kind, service, tuple(argv), directory, key)
    return wanted


def supervise(
    wanted: dict[str, WantedAnalyser], children: dict[str, Child], now: float
) -> list[StopAnalyser | StartAnalyser]:
    """Stops first (a changed argument list stops the old process before the new starts)."""
    stops: list[StopAnalyser | StartAnalyser] = []
    starts: list[StopAnalyser | StartAnalyser] = []
    for name, child in sorted(children.items()):
        if child.pid is None:
            continue
        if name not in wanted:
            stops.append(StopAnalyser(name, child.pid, "the plan no longer asks for it"))
        elif wanted[name].argv != child.argv:
            stops.append(StopAnalyser(name, child.pid, "its arguments changed"))
    for name, analyser in sorted(wanted.items()):
        known = children.get(name)
        if known is None or known.argv != analyser.argv:
            starts.append(StartAnalyser(analyser))
        elif known.pid is None and now >= known.retry_at:
            starts.append(StartAnalyser(analyser, restart=True))
    return stops + starts


def backoff_s(failures: int, base_s: float, max_s: float) -> float:
    return min(max_s, base_s * 2 ** max(0, failures - 1))


def exited(child: Child, exit_code: int | None, now: float, base_s: float, max_s: float) -> Child:
    """``child`` after its process exited: when it may start again."""
    failures = 1 if now - child.started_at >= STABLE_S else child.failures + 1
    return replace(
        child,
        pid=None,
        exit_code=exit_code,
        failures=failures,
        retry_at=now + backoff_s(failures, base_s, max_s),
    )


def describe(
    children: dict[str, Child], wanted: dict[str, WantedAnalyser], now: float
) -> list[dict]:
    """The analysers' part of the agent's status."""
    out = []
    for name in sorted(set(children) | set(wanted)):
        child, want = children.get(name), wanted.get(name)
        state = (
            "running" if child and child.pid is not None else "waiting" if child else "not_started"
        )
        out.append(
            {
                "name": name,
                "role": want.role if want else None,
                "service": want.service if want else None,
                "state": state,
                "pid": child.pid if child else None,
                "restarts": child.restarts if child else 0,
                "last_exit": child.exit_code if child else None,
                "retry_in_s": round(max(0.0, child.retry_at - now), 1)
                if child and child.pid is None
                else None,
                "state_dir": want.state_dir if want else (child.state_dir if child else None),
                "wanted": want is not None,
            }
        )
    return out
