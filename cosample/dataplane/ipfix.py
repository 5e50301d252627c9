"""The `sample` local mechanism's constants shared by planner, agents and collector.

A host whose plan says ``local_mechanism: "sample"`` samples its own traffic with OVS's
OpenFlow ``sample`` action at probability ``sample_probability / SAMPLE_PROBABILITY_SCALE`` and
exports IPFIX records through one ``Flow_Sample_Collector_Set`` (docs/formats.md).
"""

#: OVS's ``sample(probability=K)`` draws K out of this many packets (a 16-bit field).
SAMPLE_PROBABILITY_SCALE = 65535
#: The ``id`` of the agents' ``Flow_Sample_Collector_Set`` row, and the sample actions'
#: ``collector_set_id``.
SAMPLE_COLLECTOR_SET_ID = 0xC05A
#: RFC 7011's default IPFIX port: the collector's default IPFIX listening port.
IPFIX_PORT = 4739
#: The flow cache's active timeout the agents give OVS's exporter unless the plan says otherwise
#: (``ipfix.cache_active_timeout_s``; the agents' ``ipfix_cache_active_timeout_s``): the longest
#: span one record covers, so the collector's bound on a record's packets.
CACHE_ACTIVE_TIMEOUT_S = 1
