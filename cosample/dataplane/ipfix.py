"""Constants of the ``sample`` local mechanism shared by planner, agents and collector (issue 24).

OVS's OpenFlow ``sample`` action draws with probability ``probability / SAMPLE_PROBABILITY_SCALE``
and exports IPFIX through the ``Flow_Sample_Collector_Set`` whose ``id`` the action names.
"""

SAMPLE_PROBABILITY_SCALE = 65535
SAMPLE_COLLECTOR_SET_ID = 0xC05A
IPFIX_PORT = 4739
