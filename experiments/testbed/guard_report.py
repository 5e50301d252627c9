"""What ``--scenario guard`` measured, per round and server (pure): forwarding lost before,
during and after the hog, the time to relief, the guard's steps, and how often the collector's
intervals held the packets the datapath read (docs/testbed.md, "The guard")."""

from __future__ import annotations

from typing import Any

#: A second whose forwarding lost less than this share of what the VM sent is a relieved one,
RELIEVED = 0.01
#: ... and relief is this many such seconds in a row.
RELIEF_SECONDS = 3


def server_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per round and server."""
    settings = result["settings"]
    out = []
    for round_ in result["rounds"]:
        rows = round_["rows"]
        for name in _servers(rows):
            out.append(_server(round_, name, rows, settings))
    return out


def _servers(rows: list[dict]) -> list[str]:
    """The servers a round's rows are about (their entries count packets)."""
    if not rows:
        return []
    return [key for key, value in rows[0].items() if isinstance(value, dict) and "sent" in value]


def _server(round_, name: str, rows: list[dict], settings: dict) -> dict[str, Any]:
    start, end = settings["before_s"], settings["before_s"] + settings["hog_s"]
    mine = [(row["t"], row[name]) for row in rows]
    phases = {
        "before": [e for t, e in mine if t <= start],
        "hog": [e for t, e in mine if start < t <= end],
        "after": [e for t, e in mine if t > end + settings["window_s"]],
    }
    out: dict[str, Any] = {
        "round": round_["round"],
        "server": name,
        "guard": "on" if round_["guarded"] == name else "off",
    }
    for phase, entries in phases.items():
        sent = sum(e["sent"] for e in entries)
        lost = sum(e["sent"] - e["delivered"] for e in entries)
        out[f"{phase}_sent"] = sent
        out[f"{phase}_lost"] = lost
        out[f"{phase}_loss"] = lost / sent if sent else 0.0
    hog = [(t - start, e) for t, e in mine if start < t <= end]
    out["relief_s"] = relief_time(hog)
    rungs = [(t, e.get("rung") or 0) for t, e in hog]
    stepped = [t for t, rung in rungs if rung > 0]
    out["first_step_s"] = stepped[0] if stepped else None
    out["max_rung"] = max((rung for _, rung in rungs), default=0)
    after = [(t - end, e.get("rung") or 0) for t, e in mine if t > end]
    back = [t for t, rung in after if rung == 0]
    out["back_on_plan_s"] = back[0] if out["max_rung"] and back else None
    busy = [e["busy"] for _, e in hog if e.get("busy") is not None]
    out["busy_hog_median"] = sorted(busy)[len(busy) // 2] if busy else None
    covered, checked, step_covered, step_checked, errors = coverage(
        rows, name, settings, start, end
    )
    out["median_error"] = sorted(errors)[len(errors) // 2] if errors else None
    out["estimates_checked"] = checked
    out["estimates_inside"] = covered
    out["step_estimates_checked"] = step_checked
    out["step_estimates_inside"] = step_covered
    return out


def relief_time(seconds: list[tuple[float, dict]]) -> float | None:
    """Seconds from the hog's start to the first of ``RELIEF_SECONDS`` relieved seconds in a
    row (0: never hurt); None: not within the hog."""
    run = 0
    for k, (t, entry) in enumerate(seconds):
        sent = entry["sent"]
        relieved = sent <= 0 or (sent - entry["delivered"]) / sent < RELIEVED
        run = run + 1 if relieved else 0
        if run == RELIEF_SECONDS:
            first = seconds[k - RELIEF_SECONDS + 1][0]
            return max(0.0, first - 1.0)  # a row covers the second before its time
    return None


#: A sample reaches the collector up to this long after its packet crossed the bridge (OVS
#: sends a datagram when it is full or a second old): the window the estimate stands for ends
#: between its snapshot's time and this much earlier.
ARRIVAL_S = 1.0


def coverage(
    rows: list[dict], name: str, settings: dict, start: float, end: float
) -> tuple[int, int, int, int, list[float]]:
    """How many of the collector's estimates had the packets the datapath read from the VM in
    their window inside their 95 % interval: the counters interpolated (by wall-clock time) to
    the snapshot's window, ending at its time or up to ``ARRIVAL_S`` earlier (the truth as a
    range). All estimates once a whole window lies in the run, and those within two windows
    after the hog's start or end (while rates change); and each estimate's relative distance
    from the truth's range (0 inside it: a 1-in-1 stream's interval has no width, so this says
    how far it is)."""
    covered = checked = step_covered = step_checked = 0
    errors: list[float] = []
    times = [row["wall"] for row in rows]
    totals = [row[name]["taken_total"] for row in rows]
    for row in rows:
        estimate, at = row[name].get("estimate"), row.get("snapshot_time")
        window = row[name].get("window_s")
        if estimate is None or at is None or window is None:
            continue
        if at - window - ARRIVAL_S < times[0] or at > times[-1]:
            continue
        truths = [
            (_at(times, totals, at - shift) - _at(times, totals, at - shift - window)) / window
            for shift in (0.0, ARRIVAL_S / 2, ARRIVAL_S)
        ]
        inside = estimate[1] <= max(truths) and min(truths) <= estimate[2]
        middle = estimate[0]
        errors.append(max(0.0, min(truths) - middle, middle - max(truths)) / max(truths))
        checked += 1
        covered += inside
        t = row["t"]
        if (
            start < t <= start + 2 * settings["window_s"]
            or end < t <= end + 2 * settings["window_s"]
        ):
            step_checked += 1
            step_covered += inside
    return covered, checked, step_covered, step_checked, errors


def _at(times: list[float], values: list[float], moment: float) -> float:
    """``values`` (a counter read at ``times``) at ``moment``, linearly between two reads."""
    for k in range(1, len(times)):
        if times[k] >= moment:
            share = (moment - times[k - 1]) / (times[k] - times[k - 1])
            return values[k - 1] + share * (values[k] - values[k - 1])
    return values[-1]


def markdown(result: dict[str, Any], command: str) -> str:
    rows = server_rows(result)
    settings = result["settings"]
    lines = [
        "# The guard under a CPU hog",
        "",
        f"`{command}`",
        "",
        f"Each server forwards {settings['pps']:g} pps VM to VM, sampled "
        f"1-in-{settings['sampling']} by its plan "
        f"(floor 1-in-{settings['floor_sampling']}, limit {settings['limit']:g}); its "
        f"ovs-vswitchd has a budget of {settings['budget_cpus']:g} CPU, in which "
        f"{settings['hogs']} busy loop(s) run beside it from {settings['before_s']:g} s to "
        f"{settings['before_s'] + settings['hog_s']:g} s. Collector window "
        f"{settings['window_s']:g} s; an estimate is checked against the packets the datapath "
        f"read from the VM over its window (ending at its time or up to {ARRIVAL_S:g} s earlier: "
        "samples travel in datagrams up to a second old).",
        "",
        "| round | server | guard | loss before | loss during hog | lost in hog | relief (s) | "
        "first step (s) | max rung | back on plan (s) | busy (median, hog) | estimates inside "
        "their interval | of them while rates change | median estimate error |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['round']} | {r['server']} | {r['guard']} | {r['before_loss']:.2%} | "
            f"{r['hog_loss']:.2%} | {r['hog_lost']} of {r['hog_sent']} | "
            f"{_opt(r['relief_s'], 'none')} | {_opt(r['first_step_s'])} | {r['max_rung']} | "
            f"{_opt(r['back_on_plan_s'])} | {_opt(r['busy_hog_median'], fmt='{:.2f}')} | "
            f"{r['estimates_inside']}/{r['estimates_checked']} | "
            f"{r['step_estimates_inside']}/{r['step_estimates_checked']} | "
            f"{_opt(r['median_error'], fmt='{:.2%}')} |"
        )
    return "\n".join(lines) + "\n"


def _opt(value, missing: str = "-", fmt: str = "{:g}") -> str:
    return missing if value is None else fmt.format(value)
