"""An emulated data centre on one machine that validates collaborative sampling end to end.

``topology`` (pure data) -> ``build`` (namespaces, a private OVS per server, VXLAN underlay,
ledger for ``down``) -> ``experiment`` (``traffic``: iperf3 flows; ``plans``: description and
plans through the planner; ``apply``: the real agents; ``measure``: counters and sFlow samples)
-> ``report`` (tidy CSV, summary, figure, markdown); ``cli`` adds ``cosample testbed
up|run|down``. See docs/testbed.md.
"""
