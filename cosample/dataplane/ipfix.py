"""The constants of the OpenFlow ``sample`` local mechanism, shared by planner, agents and collector."""

SAMPLE_PROBABILITY_SCALE = 65535
SAMPLE_COLLECTOR_SET_ID = 0xC05A
IPFIX_PORT = 4739
