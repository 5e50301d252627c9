"""The agent's configuration: strict, declarative, one error naming the bad key (as faucet does).

Sources, later ones winning: built-in defaults, a TOML or YAML file (``--config``), command-line
flags. The configuration is a pydantic model (``cosample.validation``): unknown keys, wrong
types and out-of-range values raise one ``ConfigError`` naming the source, the key and the bad
value; ``cosample agent check-config`` prints the normalised result.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from cosample.agents.errors import ConfigError
from cosample.dataplane.ipfix import CACHE_ACTIVE_TIMEOUT_S
from cosample.durations import MAX_DURATION_S
from cosample.plan.fieldtypes import HEADER_BYTES, MAX_SAMPLING, Collector, SflowAgent, listed
from cosample.plan.formats import DEFAULT_MAX_PLAN_MIB, SAFE_SAMPLING
from cosample.validation import InterfaceName, Strict, read_document, validate

SYSTEM_OVSDB = "unix:/var/run/openvswitch/db.sock"

#: Durations in seconds: at most ``MAX_DURATION_S`` (ten years), past which a wait overflows.
Positive = Annotated[float, Field(gt=0, le=MAX_DURATION_S, allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0, le=MAX_DURATION_S, allow_inf_nan=False)]
Port = Annotated[int, Field(ge=1, le=65535)]
#: Prefix of the names of the agent's devices and ports: 2-6 letters or digits.
Prefix = Annotated[str, Field(pattern=r"^[A-Za-z0-9]{2,6}$")]
Text = Annotated[str, Field(min_length=1)]


class AgentConfig(Strict):
    """Everything an agent needs to know that is not in the plan."""

    host: Text
    plan: Text | None = None
    interval_s: Positive = 30.0
    jitter_s: NonNegative = 5.0
    ovsdb: Text = SYSTEM_OVSDB
    ovs_rundir: Text | None = None
    bridge: InterfaceName | None = None
    vm_ports: Annotated[tuple[InterfaceName, ...], BeforeValidator(listed)] | None = None
    collector: Collector | None = None
    sflow_agent: SflowAgent | None = None
    header_bytes: Annotated[int, Field(ge=HEADER_BYTES[0], le=HEADER_BYTES[1])] = 128
    polling_s: Annotated[int, Field(ge=0, le=3600)] = 30
    #: Where a ``sample`` host's IPFIX goes when the plan's ``ipfix.collector`` is absent, and
    #: its exporter's flow cache (the calibrated setting: 1 s, 1024 flows; docs/planner.md).
    ipfix_collector: Collector | None = None
    ipfix_cache_active_timeout_s: Annotated[int, Field(ge=1, le=3600)] = CACHE_ACTIVE_TIMEOUT_S
    ipfix_cache_max_flows: Annotated[int, Field(ge=1, le=MAX_SAMPLING)] = 1024
    state_dir: Text = "/var/lib/cosample-agent"
    public_key: Text | None = None
    #: Accept plans without a signature (and warn on every cycle): for labs, never production.
    insecure_unsigned: bool = False
    safe_sampling: Annotated[int, Field(ge=1, le=MAX_SAMPLING)] = SAFE_SAMPLING
    mirror_device_prefix: Prefix = "cosm"
    tunnel_port_prefix: Prefix = "cosr"
    vxlan_port: Port = 4789
    timeout_s: Positive = 10.0
    #: Largest plan document fetched (MiB; a 10^5-server two-phase plan set is about 100 MB).
    max_plan_mib: Annotated[int, Field(ge=1, le=4096)] = DEFAULT_MAX_PLAN_MIB
    #: Fetch this host's slice (``hosts/<host>`` beside ``plan``, cosample.plan.slices) instead
    #: of the whole plan: ``auto`` when the location serves one (else the whole plan),
    #: ``always`` (a missing slice is an error), ``never``.
    slices: Literal["auto", "always", "never"] = "auto"
    metrics_port: Port | None = None
    #: Run the analysers the plan's ``appmon`` entries ask of this host (``cosample appmon
    #: run`` child processes, ``agents/analyser_procs.py``), each writing its windows under
    #: ``state_dir``/analysers/; off: an operator runs them.
    run_analysers: bool = True
    analyser_window_s: Positive = 10.0
    #: Ed25519 private key the analysers sign their snapshots with (``--snapshot-key``; the
    #: controller verifies with ``--analyser-key``); None: unsigned snapshots.
    analyser_key: Text | None = None
    #: The site's secret for compact records (a file: at least 32 bytes as hexadecimal text,
    #: mode 600, the same on every agent host; ``openssl rand -hex 32``): each sender/receiver
    #: pair's key is derived from it (docs/appmon.md, "Compact records"). Without it an
    #: analyser of records refuses to start unless ``insecure_records`` (labs only: anyone who
    #: reaches the records port can then forge the windows).
    record_secret: Text | None = None
    insecure_records: bool = False
    #: SIGTERM, then SIGKILL after this long; restarts back off from ``analyser_backoff_s``,
    #: doubling per early exit, to at most ``analyser_backoff_max_s``.
    analyser_stop_s: Positive = 5.0
    analyser_backoff_s: Positive = 1.0
    analyser_backoff_max_s: Positive = 60.0
    #: The guard (``agents/guarding.py``, docs/agents.md "The guard"): ``on`` steps sampling
    #: and mirrors down the plan's ladder while forwarding is past the plan's limit and back
    #: up after; ``report`` only logs and counts what it would do; ``off`` reads nothing.
    guard: Literal["on", "report", "off"] = "on"
    #: one reading and decision per tick (every second or faster)
    guard_interval_s: Annotated[float, Field(ge=0.1, le=1.0)] = 1.0
    #: what a reading is made of (``agents/headroom.py``): ``vswitchd`` (its forwarding
    #: threads' run + run-queue wait), ``host`` (/proc/stat), ``drops`` (ovs-appctl dpctl/show)
    guard_signals: Annotated[
        tuple[Literal["vswitchd", "host", "drops"], ...],
        BeforeValidator(listed),
        Field(min_length=1),
    ] = ("vswitchd",)
    #: step up only below limit - band, after this many readings in a row
    guard_band: Annotated[float, Field(gt=0, lt=1)] = 0.1
    guard_up_after: Annotated[int, Field(ge=1, le=3600)] = 5
    #: ``agent run``'s least severe log lines (``warning``: only the changes of state an
    #: operator must act on)
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    @property
    def rundir(self) -> str:
        """Where ``BRIDGE.mgmt`` OpenFlow sockets live: ``ovs_rundir`` or the OVSDB socket's folder."""
        if self.ovs_rundir:
            return self.ovs_rundir
        if self.ovsdb.startswith("unix:"):
            return os.path.dirname(self.ovsdb[len("unix:") :]) or "."
        return "/var/run/openvswitch"

    def as_dict(self) -> dict[str, Any]:
        out = self.model_dump()
        if out["vm_ports"] is not None:
            out["vm_ports"] = list(out["vm_ports"])
        out["guard_signals"] = list(out["guard_signals"])
        return out

    def replace(self, **changes: Any) -> "AgentConfig":
        return make_config({**self.model_dump(), **changes})


def make_config(values: Mapping[str, Any], where: str = "config") -> AgentConfig:
    """Validate ``values`` (keys as in ``AgentConfig``) into a config."""
    return validate(AgentConfig, dict(values), where=where, error=ConfigError)


def load_config(
    path: str | None, overrides: Mapping[str, Any], defaults: Mapping[str, Any] | None = None
) -> AgentConfig:
    """File (TOML by default, YAML for .yaml/.yml) merged with non-None ``overrides``;
    ``defaults`` fill what neither gives."""
    values: dict[str, Any] = dict(defaults or {})
    if path:
        values.update(_read_file(Path(path)))
    values.update({key: value for key, value in overrides.items() if value is not None})
    return make_config(values, where=path or "command line")


def _read_file(path: Path) -> dict[str, Any]:
    data = read_document(path, "agent configuration", default="TOML", error=ConfigError)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a table of keys, got {type(data).__name__}")
    return data
