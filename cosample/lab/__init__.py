"""Test and experiment rigs: private OVS instances, network namespaces, a counting sFlow collector.

Used by the cost-model harness, the tests and the emulated testbed; never by the agents on a
production host (their runtime is ``cosample.dataplane``). Everything here creates named objects
and removes exactly those, never anything else.
"""
