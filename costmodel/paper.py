"""What the paper measured (Elbouanani et al., CloudNet 2019, Sec. III), defined once.

Costs per packet in units of forwarding one, on the kernel datapath with iperf3 TCP between two
KVM VMs (docs/model.md). The planner's defaults, the heatmap, the benchmarks and the testbed
take alpha and beta from here. No imports, so command-line modules may use it in ``--help``.
"""

#: Each mechanism's coefficient ``a`` in ``T(s) = T0 / (1 + a*s)``.
PAPER_COEFFICIENTS: dict[str, float] = {
    "netlink": 0.75,  # setting 1: sampled packets only sent to user space
    "netlink_read": 1.41,  # setting 2: and their content read
    "sflow": 1.54,  # full sFlow: alpha
    "mirror": 0.46,  # port mirroring to a remote server: beta
}
#: alpha: sampling a packet with sFlow on the server that forwards it.
PAPER_ALPHA = PAPER_COEFFICIENTS["sflow"]
#: beta: mirroring a packet to another server (paid by the sender and again by the receiver).
PAPER_BETA = PAPER_COEFFICIENTS["mirror"]
