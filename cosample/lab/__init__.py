"""Shared effects for the real thing: subprocesses, private OVS instances, network namespaces.

Used by the cost-model harness, the agents' integration tests and the emulated testbed.
Everything here creates named objects and removes exactly those, never anything else.
"""
