"""An emulated data centre on one machine that validates collaborative sampling end to end.

``topology`` (pure data) -> ``build`` (namespaces, private OVS per server, VXLAN underlay) ->
``traffic`` (iperf3 flows) + ``measure`` (sFlow and OVS counters) -> ``report``; ``cli`` adds
``cosample testbed up|run|down``. See docs/testbed.md.
"""
