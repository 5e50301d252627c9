"""What a one-host calibration left behind: namespaces, links and accounting cgroups with its prefix."""

from __future__ import annotations

from cosample.costmodel.accounting import accounting_hierarchy
from cosample.dataplane.run import run


def leftovers(prefix: str) -> list[str]:
    """Namespaces, links and cgroups named with ``prefix`` still present (the prefix is ours)."""
    names = run(["ip", "netns", "list"]).stdout.split() + run(["ip", "-o", "link"]).stdout.split()
    names = [name for name in names if name.rstrip(":").split("@")[0].startswith(prefix)]
    cgroups = [path.name for path in accounting_hierarchy().glob(f"cosample-{prefix}*")]
    return names + cgroups
