"""The application mechanisms' costs in the planner's units, from a calibration JSON's ``appmon``
section (``costmodel.appmon_fit``, written by ``python -m cosample.experiments.appmon_costs``).

The planner counts CPU in packets forwarded (the sFlow plan's unit, so both parts draw on one
capacity) and the fabric in bytes per request. The calibration measures CPU seconds per request
of each mechanism and, in the same phases, ovs-vswitchd's CPU seconds per packet of the server's
port with no monitoring (``forwarding_cpu_s_per_packet``); their ratio is the cost in packets
forwarded, a ratio of two CPU times measured side by side, which carries over to hosts of other
speeds as alpha and beta do (the same argument as the seeds' defaults, ``planner.appmon``).

Where the description names no ``appmon_cost.calibration``, the servers' own calibration files
are read: each file with an ``appmon`` section gives costs, and with several the highest of
each cost is taken (the planner keeps every host within its capacity under the costliest
measurement). An explicit number in ``appmon_cost`` wins over any calibration.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cosample.costmodel.calibration_file import (
    AppmonCalibration,
    AppmonCosts,
    read_calibration_file,
)
from cosample.costmodel.coefficients import CalibrationFileError
from cosample.plan.appmon import UNCUT
from cosample.planner.errors import PlannerError
from cosample.validation import problem

log = logging.getLogger("cosample.planner")

#: planner cost -> (``appmon.mechanisms`` entry, its field); CPU fields are divided by the unit
SOURCES = {
    "onsite": ("sniffer_onsite", "cpu_s_per_request"),
    "mirror_sender": ("selective_mirror", "cpu_s_per_request"),
    "analyser": ("analysis_selective", "cpu_s_per_request"),
    "mirror_bytes": ("selective_mirror", "fabric_bytes_per_request"),
    "truncated_bytes": ("truncated_mirror", "fabric_bytes_per_request"),
    "kernel_mirror_sender": ("kernel_mirror", "cpu_s_per_request"),
}
CPU = ("onsite", "mirror_sender", "analyser", "kernel_mirror_sender")
#: costs without a default of their own: absent, the planner uses the named cost instead
FALLBACK = {"kernel_mirror_sender": "mirror_sender"}


#: Per protocol, what its monitoring costs beside HTTP/1.x's (``python -m
#: cosample.experiments.appmon_protocol_costs``, docs/data/appmon-protocols: one rig, one backend
#: URL; segments copied by the plan's rule, ``plan.appmon.DEFAULT_SEGMENTS``): the fabric bytes
#: per request whole and cut (measured), the analyser's CPU behind a mirror and on-site
#: (measured), the sender's CPU (estimated: proportional to the segments copied, OVS's copy
#: cost being per packet). The fallback: a protocol's own costs measured as HTTP/1.x's are
#: (``appmon.protocols``, ``python -m cosample.experiments.appmon_protocol_calibration``)
#: replace these estimates wherever a calibration has them (``service_cost``); else the
#: calibrated (or default) HTTP/1.x costs are multiplied by them.
PROTOCOL_FACTORS = {
    "http": {
        "sender": 1.0,
        "mirror_bytes": 1.0,
        "truncated_bytes": 1.0,
        "analyser": 1.0,
        "onsite": 1.0,
    },
    "tls": {
        "sender": 2.02,
        "mirror_bytes": 2.80,
        "truncated_bytes": 1.91,
        "analyser": 1.08,
        "onsite": 0.64,
    },
    "h2c": {
        "sender": 3.45,
        "mirror_bytes": 3.02,
        "truncated_bytes": 3.02,
        "analyser": 4.22,
        "onsite": 2.79,
    },
    "h2": {
        "sender": 2.53,
        "mirror_bytes": 2.87,
        "truncated_bytes": 2.42,
        "analyser": 1.31,
        "onsite": 0.80,
    },
}


#: which factor of ``PROTOCOL_FACTORS`` estimates each planner cost for another protocol
FACTOR_OF = {
    "onsite": "onsite",
    "mirror_sender": "sender",
    "kernel_mirror_sender": "sender",
    "analyser": "analyser",
    "mirror_bytes": "mirror_bytes",
    "truncated_bytes": "truncated_bytes",
}


def protocol_key(protocol: str, name: str) -> str:
    """The key of a protocol's own measured cost in the planner's costs (``tls:onsite``)."""
    return f"{protocol}:{name}"


def service_cost(costs: dict[str, float], protocol: str, name: str) -> tuple[float, bool]:
    """Cost ``name`` per request of a service speaking ``protocol``, and whether it was
    measured on that protocol: its own calibrated cost (``appmon.protocols``) where the
    calibration has one, else the HTTP/1.x cost (calibrated or default; for the kernel mirror,
    the selective mirror's when it has none of its own) times ``PROTOCOL_FACTORS``."""
    measured = costs.get(protocol_key(protocol, name))
    if measured is not None:
        return measured, True
    if name in FALLBACK:
        value = costs.get(name, costs[FALLBACK[name]])
    else:
        value = costs[name]
    return value * PROTOCOL_FACTORS[protocol][FACTOR_OF[name]], False


def sender_cost(costs: dict[str, float], mechanism: str, protocol: str = "http") -> float:
    """The sender's CPU per mirrored request of ``mechanism`` (a plan's mirror mechanism): the
    kernel mirror's own cost where calibrated or given, else the selective mirror's."""
    name = "kernel_mirror_sender" if mechanism == "kernel_mirror" else "mirror_sender"
    return service_cost(costs, protocol, name)[0]


def _converted(
    section: AppmonCosts, where: str, protocol: str | None = None
) -> tuple[dict[str, float], list[str]]:
    """The planner's costs from one run's section (``protocol`` None: the HTTP/1.x section,
    whose costs replace the defaults when above 0; else a protocol's, whose costs replace the
    estimate only where resolved: above 0 and, for CPU, the interval's lower end too)."""
    unit = section.forwarding_cpu_s_per_packet
    at = "appmon" if protocol is None else f"appmon.protocols.{protocol}"
    if unit is None or not unit > 0:
        raise PlannerError(
            f"{where}: {at}.forwarding_cpu_s_per_packet: needed to convert the "
            f"application costs to packets forwarded, got {unit!r} (refit with "
            f"python -m cosample.experiments.appmon_costs --from-csv)"
        )
    costs, notes = {}, []
    for name, (mechanism, field) in SOURCES.items():
        entry = section.mechanisms.get(mechanism)
        if protocol is None:
            instead = (
                f"the planner uses {FALLBACK[name]}" if name in FALLBACK else "keeps its default"
            )
        else:
            instead = f"{protocol}'s {name} stays estimated (PROTOCOL_FACTORS)"
        if entry is None:
            if protocol is None or name != "truncated_bytes" or protocol not in UNCUT:
                notes.append(f"{where}: {at}.mechanisms.{mechanism} absent: {name} {instead}")
            continue
        value, low = getattr(entry, field), getattr(entry, f"{field}_ci")[0]
        if name in CPU:
            value = value / unit
        resolved = value > 0 and (
            protocol is None or name not in CPU or (low is not None and low > 0)
        )
        if not resolved:
            measured = getattr(entry, field)
            what = (
                f"= {measured!r} is not above 0"
                if not measured > 0
                else f"= {measured:.3g}, its interval {getattr(entry, f'{field}_ci')} not above 0"
            )
            notes.append(f"{where}: {at}.mechanisms.{mechanism}.{field} {what}: {name} {instead}")
            continue
        costs[name if protocol is None else protocol_key(protocol, name)] = float(value)
    return costs, notes


def costs_from_calibration(
    section: AppmonCalibration, where: str
) -> tuple[dict[str, float], list[str]]:
    """The planner's ``appmon_cost`` from one ``appmon`` section, and notes on what it could
    not give (a cost measured at or below zero, e.g. a mirror's slope not separable from 0:
    the default stays; a protocol's cost not resolved from 0: its estimate stays); an error
    naming the file and field if a unit is missing. A protocol's own costs (``protocols``)
    come keyed ``protocol_key(protocol, name)``, each in its own run's unit."""
    costs, notes = _converted(section, where)
    for protocol, costed in sorted(section.protocols.items()):
        more, more_notes = _converted(costed, where, protocol)
        costs |= more
        notes += more_notes
    return costs, notes


def highest(costs: Iterable[dict[str, float]]) -> dict[str, float]:
    """Per cost, the highest value any calibration gave."""
    out: dict[str, float] = {}
    for one in costs:
        for name, value in one.items():
            out[name] = max(out.get(name, value), value)
    return out


def resolve(given: Any, sections: dict[Path, Any], base_dir: Path, source: str) -> dict[str, float]:
    """``appmon_cost`` (the description's or the inventory's): its explicit numbers, over the
    calibrated costs of its ``calibration`` file or, without one, of ``sections`` (the servers'
    calibration files' ``appmon`` sections)."""
    explicit = given.model_dump(exclude_none=True, exclude={"calibration"})
    if given.calibration is not None:
        path = base_dir / given.calibration
        try:
            document = read_calibration_file(path)
        except CalibrationFileError as exc:
            raise problem(
                ("appmon_cost", "calibration"), str(exc), where=source, error=PlannerError
            ) from None
        if document.appmon is None:
            raise problem(
                ("appmon_cost", "calibration"),
                f"{path} has no appmon section (write "
                f"it with python -m cosample.experiments.appmon_costs)",
                given.calibration,
                where=source,
                error=PlannerError,
            )
        sections = {path: document.appmon}
    calibrated = []
    for path, section in sorted(sections.items()):
        costs, notes = costs_from_calibration(section, str(path))
        for note in notes:
            log.info("%s", note)
        calibrated.append(costs)
    measured = highest(calibrated)
    # an explicit number is the HTTP/1.x cost every protocol's estimate scales: it wins over
    # the protocols' measured costs of its name too
    kept = {key: value for key, value in measured.items() if key.rpartition(":")[2] not in explicit}
    return {**kept, **explicit}
