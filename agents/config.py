"""The agent's configuration: strict, declarative, one error naming the bad key (as faucet does).

Sources, later ones winning: built-in defaults, a TOML or YAML file (``--config``), command-line
flags. Unknown keys, wrong types and out-of-range values raise ``ConfigError``;
``cosample agent check-config`` prints the normalised result.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cosample.agents.errors import ConfigError

SYSTEM_OVSDB = "unix:/var/run/openvswitch/db.sock"


@dataclass(frozen=True)
class AgentConfig:
    """Everything an agent needs to know that is not in the plan."""

    host: str
    plan: str | None = None
    interval_s: float = 30.0
    jitter_s: float = 5.0
    ovsdb: str = SYSTEM_OVSDB
    ovs_rundir: str | None = None
    bridge: str | None = None
    vm_ports: tuple[str, ...] | None = None
    collector: str | None = None
    sflow_agent: str | None = None
    header_bytes: int = 128
    polling_s: int = 30
    state_dir: str = "/var/lib/cosample-agent"
    public_key: str | None = None
    safe_sampling: int = 4096
    mirror_device_prefix: str = "cosm"
    tunnel_port_prefix: str = "cosr"
    vxlan_port: int = 4789
    timeout_s: float = 10.0
    metrics_port: int | None = None

    @property
    def rundir(self) -> str:
        """Where ``BRIDGE.mgmt`` OpenFlow sockets live: ``ovs_rundir`` or the OVSDB socket's folder."""
        if self.ovs_rundir:
            return self.ovs_rundir
        if self.ovsdb.startswith("unix:"):
            return os.path.dirname(self.ovsdb[len("unix:"):]) or "."
        return "/var/run/openvswitch"

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if out["vm_ports"] is not None:
            out["vm_ports"] = list(out["vm_ports"])
        return out


_FIELDS = {f.name: f for f in dataclasses.fields(AgentConfig)}
_POSITIVE = {"interval_s", "timeout_s", "safe_sampling", "vxlan_port"}
_NON_NEGATIVE = {"jitter_s", "header_bytes", "polling_s"}
_PREFIXES = {"mirror_device_prefix", "tunnel_port_prefix"}


def make_config(values: Mapping[str, Any], where: str = "config") -> AgentConfig:
    """Validate ``values`` (keys as in ``AgentConfig``) into a config."""
    unknown = sorted(set(values) - set(_FIELDS))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; known keys: "
                          f"{', '.join(sorted(_FIELDS))}")
    clean = {key: _check(key, value, where) for key, value in values.items()}
    if "host" not in clean:
        raise ConfigError(f"{where}: 'host' is required (the host's name in the plan)")
    return AgentConfig(**clean)


def load_config(path: str | None, overrides: Mapping[str, Any]) -> AgentConfig:
    """File (TOML by default, YAML for .yaml/.yml) merged with non-None ``overrides``."""
    values: dict[str, Any] = {}
    if path:
        values.update(_read_file(Path(path)))
    values.update({key: value for key, value in overrides.items() if value is not None})
    return make_config(values, where=path or "command line")


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        data = yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else tomllib.loads(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: not valid {'YAML' if path.suffix != '.toml' else 'TOML'}: "
                          f"{exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a table of keys, got {type(data).__name__}")
    return data


def _check(key: str, value: Any, where: str) -> Any:
    def bad(expected: str) -> ConfigError:
        return ConfigError(f"{where}: {key}: expected {expected}, got {value!r}")

    annotation = str(_FIELDS[key].type)
    if key == "vm_ports":
        if value is None:
            return None
        if not isinstance(value, (list, tuple)) or not all(_is_ifname(v) for v in value):
            raise bad("a list of interface names")
        return tuple(value)
    if value is None and "None" in annotation:
        return None
    if annotation.startswith("str"):
        if not isinstance(value, str) or not value:
            raise bad("a non-empty string")
        if key in _PREFIXES and not (value.isalnum() and 2 <= len(value) <= 6):
            raise bad("2-6 letters or digits")
        if key == "collector":
            host, _, port = value.rpartition(":")
            if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
                raise bad("'HOST:PORT'")
        if key == "bridge" and not _is_ifname(value):
            raise bad("an interface name (1-15 characters)")
        return value
    if annotation.startswith("int"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an integer")
    elif annotation.startswith("float"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("a number")
        value = float(value)
    if key in _POSITIVE and not value > 0:
        raise bad("a positive number")
    if key in _NON_NEGATIVE and not value >= 0:
        raise bad("a non-negative number")
    if key in ("vxlan_port", "metrics_port") and not 1 <= value <= 65535:
        raise bad("a port number in 1..65535")
    return value


def _is_ifname(value: Any) -> bool:
    return isinstance(value, str) and 1 <= len(value) <= 15 and "/" not in value and " " not in value
