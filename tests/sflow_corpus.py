"""Streams built from real sFlow datagrams for the collector's tests (``cosample.lab.sflowcorpus``
builds them; tests/data/sflow holds the captures, see its README)."""

from __future__ import annotations

from cosample.lab.sflowcorpus import CORPUS, Template, stream, template

__all__ = ["CORPUS", "TEMPLATES", "Template", "estimate", "stream", "template"]

#: Captures whose samples have a sampling rate above 1 (a 1-in-1 interval has zero width).
TEMPLATES = (
    "data-1140.pcap",
    "data-qinq.pcap",
    "data-sflow-ipv4-data.pcap",
    "data-sflow-expanded-sample.pcap",
)


def estimate(base: Template, datagrams, *, window_s: float | None = None):
    """(packets in the window, interval low, interval high, snapshot) of the template's agent,
    sampling at the rate it reports (plan-less attribution by its address)."""
    from cosample.collector.attribution import planless
    from cosample.collector.estimate import Estimator
    from cosample.collector.inventory import Inventory

    inventory = Inventory.model_validate({"servers": {"s": {"agent_ip": base.agent}}})
    estimator = Estimator(planless(inventory), window_s=window_s, name="t")
    last = 0.0
    for when, data in datagrams:
        estimator.ingest(bytes(data), when)
        last = max(last, when)
    snapshot = estimator.snapshot(last)
    row, window = snapshot.servers["s"], snapshot.window_s
    low, high = row.packets_per_s_ci95
    return row.packets_per_s * window, low * window, high * window, snapshot
