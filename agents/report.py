"""What an agent tells operators: a JSON status file and Prometheus metrics.

Both are written atomically into the state directory after every cycle: ``status.json`` and
``metrics.prom`` (node-exporter textfile-collector format). ``serve_metrics`` optionally exposes
the same registry over HTTP on 127.0.0.1.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from cosample import __version__
from cosample.agents.appmon_state import summary as appmon_summary
from cosample.agents.errors import AgentError
from cosample.agents.hoststate import DesiredState
from cosample.files import write_bytes_atomic
from cosample.httpserver import BoundedHTTPServer, ServerMetrics, send_body
from cosample.plan.formats import FORMAT_VERSION
from cosample.validation import parse_refusal

STATUS_FILE, METRICS_FILE = "status.json", "metrics.prom"
#: How the warning about unsigned plans begins (``planreader.unsigned_warning``): the metric
#: ``cosample_agent_insecure`` counts it, not the other warnings (``agents.mtu``).
INSECURE_TAG = "INSECURE:"
RESULTS = ("ok", "degraded", "rejected", "diverged", "error")


@dataclass(frozen=True)
class CycleReport:
    """One cycle: what ran, what changed, what is wrong."""

    host: str
    time: str
    result: str  # ok | degraded | rejected | diverged | error | dry-run
    mode: str  # plan | safe
    reason: str
    plan_version: int | None = None
    plan_id: str | None = None
    plan_expires: str | None = None
    pending_version: int | None = None
    commands: tuple[str, ...] = ()
    remaining: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    desired: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    #: the analyser processes this agent runs (``analysers.describe``)
    analysers: tuple[dict[str, Any], ...] = ()
    #: the guard's state (``guarding.GuardStatus``); None without a guard
    guard: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            key: list(value) if isinstance(value, tuple) else value
            for key, value in self.__dict__.items()
        }


def summarise(desired: DesiredState | None) -> dict[str, Any]:
    """The desired state in a few JSON-safe fields."""
    if desired is None:
        return {}
    sample = desired.sample
    return {
        "bridge": desired.bridge,
        "local_mechanism": "sample" if sample else "sflow",
        "sflow_sampling": desired.sflow.sampling if desired.sflow else None,
        "collector": desired.sflow.target if desired.sflow else None,
        **(
            {
                "sample_probability": sample.probability,
                "observation_domain": sample.domain,
                "ipfix_collector": sample.ipfix.target,
            }
            if sample
            else {}
        ),
        "mirrors": {t.peer: t.rate for t in desired.mirrors},
        "receives_from": [p.peer for p in desired.receivers],
        **({"appmon": appmon} if (appmon := appmon_summary(desired.appmon)) else {}),
    }


class Metrics:
    """The agent's Prometheus metrics in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.plan_version = Gauge(
            "cosample_agent_plan_version", "Version of the running plan (-1: none)", registry=r
        )
        Gauge(
            "cosample_agent_build_info",
            "1, labelled with the cosample version and the plan format versions this agent reads",
            ["version", "plan_formats_read"],
            registry=r,
        ).labels(__version__, str(FORMAT_VERSION)).set(1)
        self.safe_state = Gauge(
            "cosample_agent_safe_state", "1 when in the safe fallback state", registry=r
        )
        self.last_success = Gauge(
            "cosample_agent_last_apply_success", "1 if the last cycle converged", registry=r
        )
        self.last_time = Gauge(
            "cosample_agent_last_apply_timestamp_seconds", "Unix time of the last cycle", registry=r
        )
        self.plan_expires = Gauge(
            "cosample_agent_plan_expires_timestamp_seconds",
            "Unix time the running plan expires (0: no plan)",
            registry=r,
        )
        self.sampling = Gauge(
            "cosample_agent_sflow_sampling_n", "Configured sFlow 1-in-N (0: none)", registry=r
        )
        self.sample_probability = Gauge(
            "cosample_agent_sample_probability",
            "Probability of the sample action, of 65535 "
            "(0: the host samples with sFlow or not at all)",
            registry=r,
        )
        self.mirror_rate = Gauge(
            "cosample_agent_mirror_ratio",
            "Planned mirrored share of own traffic",
            ["target"],
            registry=r,
        )
        self.receivers = Gauge(
            "cosample_agent_receiver_tunnels", "Receiver tunnel ports wanted", registry=r
        )
        self.commands = Counter("cosample_agent_commands_applied", "Commands applied", registry=r)
        self.errors = Counter("cosample_agent_errors", "Errors by kind", ["kind"], registry=r)
        self.plan_fetches = Counter(
            "cosample_agent_plan_fetches",
            "Plan polls by result: downloaded, or unchanged (HTTP 304 / same file: no body)",
            ["result"],
            registry=r,
        )
        self.problems = Gauge(
            "cosample_agent_problems", "Problems reported and left alone", registry=r
        )
        self.result = Gauge(
            "cosample_agent_last_result",
            "1 for the last cycle's result (ok, degraded, rejected, diverged, error)",
            ["result"],
            registry=r,
        )
        self.analysers = Gauge(
            "cosample_agent_analysers",
            "Analyser processes by state (running, waiting to restart, not started)",
            ["state"],
            registry=r,
        )
        self.analyser_restarts = Gauge(
            "cosample_agent_analyser_restarts",
            "Restarts of the analysers wanted now, summed",
            registry=r,
        )
        self.guard_rung = Gauge(
            "cosample_agent_guard_rung",
            "Rung of the plan's ladder the guard runs (0: the plan itself)",
            registry=r,
        )
        self.guard_busy = Gauge(
            "cosample_agent_guard_busy_ratio",
            "The guard's last reading of forwarding busy (1: no time to spare)",
            registry=r,
        )
        self.guard_steps = Counter(
            "cosample_agent_guard_steps",
            "Steps the guard took along the ladder, by direction (down, up)",
            ["direction"],
            registry=r,
        )
        self._guard_steps = {"down": 0, "up": 0}  # the counts the counter has been told
        self.insecure = Gauge(
            "cosample_agent_insecure_unsigned",
            "1 when plans are accepted without a signature",
            registry=r,
        )

    def record(
        self,
        report: CycleReport,
        desired: DesiredState | None,
        unix_time: float,
        error_kinds: list[str],
    ) -> None:
        self.plan_version.set(report.plan_version if report.plan_version is not None else -1)
        self.safe_state.set(1 if report.mode == "safe" else 0)
        self.last_success.set(1 if report.result == "ok" else 0)
        self.last_time.set(unix_time)
        self.plan_expires.set(
            datetime.fromisoformat(report.plan_expires).timestamp() if report.plan_expires else 0
        )
        self.sampling.set(desired.sflow.sampling if desired and desired.sflow else 0)
        self.sample_probability.set(desired.sample.probability if desired and desired.sample else 0)
        self.mirror_rate.clear()
        for target in desired.mirrors if desired else ():
            self.mirror_rate.labels(target=target.peer).set(target.rate)
        self.receivers.set(len(desired.receivers) if desired else 0)
        if report.result != "dry-run":
            self.commands.inc(len(report.commands))
        for kind in error_kinds:
            self.errors.labels(kind=kind).inc()
        self.problems.set(len(report.problems))
        for result in RESULTS:
            self.result.labels(result=result).set(1 if report.result == result else 0)
        self.insecure.set(1 if any(w.startswith(INSECURE_TAG) for w in report.warnings) else 0)
        for state in ("running", "waiting", "not_started"):
            self.analysers.labels(state=state).set(
                sum(a["state"] == state for a in report.analysers)
            )
        self.analyser_restarts.set(sum(a["restarts"] for a in report.analysers))
        self.record_guard(report.guard)

    def record_guard(self, guard: dict[str, Any] | None) -> None:
        """The guard's gauges (also after a tick without a step: the HTTP metrics read them)."""
        if guard is None:
            return
        self.guard_rung.set(guard["rung"] if guard["mode"] == "on" else 0)
        self.guard_busy.set(guard["busy"] if guard["busy"] is not None else 0)
        for direction in ("down", "up"):
            steps = guard[f"steps_{direction}"]
            self.guard_steps.labels(direction=direction).inc(
                max(0, steps - self._guard_steps[direction])
            )
            self._guard_steps[direction] = steps

    def text(self) -> bytes:
        return generate_latest(self.registry)


def write_reports(state_dir: str | Path, report: CycleReport, metrics: Metrics) -> None:
    """``status.json`` and ``metrics.prom`` in ``state_dir``, each replaced atomically."""
    state_dir = Path(state_dir)
    status = json.dumps(report.as_dict(), indent=2, sort_keys=True) + "\n"
    write_bytes_atomic(state_dir / STATUS_FILE, status.encode(), mode=0o600, parents=True)
    write_bytes_atomic(state_dir / METRICS_FILE, metrics.text(), mode=0o600, parents=True)


def read_status(state_dir: str | Path) -> dict[str, Any] | None:
    """The last cycle's status; None before the first; ``AgentError`` when it cannot be read
    (not a folder, not JSON: someone else's file)."""
    path = Path(state_dir) / STATUS_FILE
    try:
        status = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else parse_refusal(exc)
        raise AgentError(f"{path}: cannot read the agent's status ({reason})") from None
    if not isinstance(status, dict):
        raise AgentError(f"{path}: not an agent's status (a {type(status).__name__})")
    return status


def serve_metrics(metrics: Metrics, port: int):
    """Expose the registry on http://127.0.0.1:PORT/metrics (a daemon thread) with the daemons'
    one HTTP server (``cosample.httpserver``; its own counts as ``cosample_agent_http_*``);
    returns the server."""
    own = CollectorRegistry(auto_describe=False)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] not in ("/", "/metrics"):
                self.send_error(404, "try /metrics")
                return
            body = metrics.text() + generate_latest(own)
            send_body(self, body, "text/plain; version=0.0.4; charset=utf-8")

        def log_message(self, *args: Any) -> None:
            pass

    server = BoundedHTTPServer(("127.0.0.1", port), Handler)
    own.register(ServerMetrics("cosample_agent", lambda: server))
    threading.Thread(target=server.serve_forever, name="agent-metrics", daemon=True).start()
    return server
