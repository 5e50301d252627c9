"""The human view of a plan: one table row per server and a summary (rendered with rich)."""

from __future__ import annotations

from typing import Any

from rich.console import Console, JustifyMethod
from rich.table import Table

MAX_ROWS = 60


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def _pps(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    if value >= 1e3:
        return f"{value / 1e3:.1f}k"
    return f"{value:.0f}"


def plan_table(plan: dict[str, Any]) -> Table:
    """Per server: traffic, load, role, local rate and N, mirrors, receptions, capacity use."""
    table = Table(
        title=f"cosample plan for {plan['datacentre']} "
        f"(solver {plan['solver']['name']}, version {plan['version']})"
    )
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("server", "left"),
        ("own pps", "right"),
        ("fwd load", "right"),
        ("role", "left"),
        ("local rate", "right"),
        ("sFlow 1-in-N", "right"),
        ("mirrors to", "left"),
        ("receives", "right"),
        ("capacity use", "right"),
    )
    for heading, justify in columns:
        table.add_column(heading, justify=justify)
    hosts = plan["hosts"]
    count = plan["summary"]["servers"]
    busiest = getattr(hosts, "busiest", None)  # a HostTable has them without being parsed
    if busiest is not None:
        names = list(busiest) if count > MAX_ROWS else sorted(busiest)
        hosts = busiest
    else:
        names = list(hosts)
        if len(names) > MAX_ROWS:  # the busiest first: those are the ones worth reading
            names = sorted(names, key=lambda n: -hosts[n]["capacity_use"])[:MAX_ROWS]
    for name in names:
        host = hosts[name]
        capacity = host["capacity_pps"]
        mirrors = ", ".join(f"{m['to']} {_pct(m['rate'])}" for m in host["mirrors"]) or "-"
        received = sum(r["pps"] for r in host["receives"])
        table.add_row(
            name,
            _pps(host["own_pps"]),
            _pct(host["forwarding_pps"] / capacity) if capacity else "-",
            host["role"],
            _pct(host["local_rate"]),
            str(host["sflow_sampling"] or "off"),
            mirrors,
            _pps(received) if received else "-",
            _pct(host["capacity_use"]),
        )
    if count > len(names):
        table.caption = f"{len(names)} busiest of {count} servers shown"
    return table


def summary_lines(plan: dict[str, Any]) -> list[str]:
    """Distinct packets first (what the fleet collects), then planned, samples and the bound."""
    summary = plan["summary"]
    objective = summary["objective"]
    assumptions = summary["assumptions"]
    unit = "weighted pps" if objective["weighted"] else "pps"
    proof = (
        "proved optimal"
        + (" over every applied plan" if objective.get("bound_applied") is not None else "")
        if objective["optimal"]
        else f"within {_pct(objective['gap'])} of the bound"
    )
    mechanisms = summary.get("local_mechanisms") or {}
    applied = "sFlow 1-in-N and sample K/65535" if mechanisms.get("sample") else "sFlow 1-in-N"
    lines = [
        f"collected  {summary['collected_pps']:,.0f} distinct pps of "
        f"{summary['own_pps_total']:,.0f} ({_pct(summary['coverage'])}) as applied "
        f"({applied}); planned {summary['collected_planned_pps']:,.0f}",
        f"samples    {summary['samples_pps']:,.0f} samples/s to the collector, "
        f"{summary['overlap_pps']:,.0f} of them duplicates or inbound"
        + (
            f" (budget {assumptions['collector_cap_pps']:,.0f})"
            if assumptions["collector_cap_pps"] is not None
            else ""
        ),
        f"bound      objective {objective['planned']:,.0f} {unit}, {proof} "
        f"({objective['method']})"
        + "; bounds "
        + (
            f"applied {objective['bound_applied']:,.0f}, "
            if objective.get("bound_applied") is not None
            else ""
        )
        + f"continuous {objective['bound_distinct']:,.0f}, "
        f"paper's LP {objective['bound_lp']:,.0f}",
        *rounding_lines(summary.get("rounding"), "local_mechanisms" in summary),
        *mechanism_lines(summary.get("local_mechanisms")),
        f"baseline   {summary['noncollab_pps']:,.0f} pps without collaboration; "
        f"gain {_pct(summary['gain'])}",
        f"mirrors    {summary['mirror_pairs']} pairs, {summary['senders']} senders, "
        f"{summary['receivers']} receivers; max capacity use {_pct(summary['max_capacity_use'])}",
        "assumed    margin "
        + (
            f"{_pct(assumptions['margin'])}"
            if isinstance(assumptions["margin"], float)
            else str(assumptions["margin"])
        )
        + (", robust (95 % interval ends)" if assumptions["robust"] else ", point estimates")
        + (
            f"; point estimates would collect {assumptions['point_estimate_collected_pps']:,.0f} pps"
            if "point_estimate_collected_pps" in assumptions
            else ""
        ),
    ]
    lines += [f"note       {note}" for note in summary["notes"]]
    appmon = summary.get("appmon")
    if appmon:
        lines.append(
            f"appmon     {appmon['monitored_requests_per_s']:,.0f} of "
            f"{appmon['requests_per_s']:,.0f} requests/s monitored ({_pct(appmon['coverage'])}), "
            f"{appmon['services']} services: {appmon['onsite']} on-site, {appmon['mirrored']} "
            f"mirrored to {len(appmon['analysis_hosts'])} host(s), {appmon['unmonitored']} not; "
            f"{appmon['objective']['method']}, gap {_pct(appmon['objective']['gap'])} to the LP "
            f"bound; {appmon['objective']['order']}; max capacity use "
            f"{_pct(appmon['max_capacity_use'])}"
        )
    lines.append(
        f"solver     {plan['solver']['name']}"
        + (f" ({plan['solver']['lp_backend']})" if plan["solver"]["lp_backend"] else "")
        + f" in {plan['solver']['seconds'] * 1e3:.2f} ms; plan {plan['plan_id'][:12]}, "
        f"expires {plan['expires']}"
    )
    return lines


def rounding_lines(rounding: dict[str, Any] | None, sample: bool = False) -> list[str]:
    """What 1-in-N (and, with ``sample``, the sample action's K/65535) costs against the
    continuous optimum, and the servers that lose most."""
    if not rounding:
        return []
    grids = "1-in-N and K/65535 cost" if sample else "1-in-N costs"
    line = (
        f"rounding   {grids} {rounding['cost_pps']:,.0f} pps "
        f"({_pct(rounding['cost_share'])}) against the continuous optimum "
        f"{rounding['continuous_pps']:,.0f}"
    )
    if rounding["cost_pps"] < 0:  # servers taking copies at their own 1-in-N beat it
        line = (
            f"rounding   as applied {-rounding['cost_pps']:,.0f} pps "
            f"({_pct(-rounding['cost_share'])}) more than the continuous optimum "
            f"{rounding['continuous_pps']:,.0f} (receivers at 1-in-1 there)"
        )
    if rounding["servers"]:
        line += "; most: " + ", ".join(
            f"{s['name']} -{_pps(s['loss_pps'])}" for s in rounding["servers"]
        )
    return [line]


def mechanism_lines(counts: dict[str, int] | None) -> list[str]:
    """How many hosts take their local share by each mechanism (when some may use ``sample``)."""
    if not counts:
        return []
    return [
        f"local mechanisms {counts['sample']:,} sample (K/65535), {counts['sflow']:,} "
        f"sFlow 1-in-N, {counts['off']:,} off; {counts['may_sample']:,} may use sample"
    ]


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """Output closed early (``| head``): stop as every command does (``cosample.cli``),
        not by rich's own exit."""
        self.quiet = True
        raise BrokenPipeError


def default_console(stderr: bool = False) -> Console:
    """A console as wide as the terminal, or 132 columns when output is not a terminal;
    ``stderr``: on standard error (when standard output carries the plan)."""
    probe = _Console(stderr=stderr)
    return probe if probe.is_terminal else _Console(width=132, stderr=stderr)


def print_plan(plan: dict[str, Any], console: Console | None = None) -> None:
    console = console or default_console()
    console.print(plan_table(plan))
    for line in summary_lines(plan):
        console.print(line, highlight=False)
