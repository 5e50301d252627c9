"""Application monitoring from mirrored packets: HTTP service time, load and success rate per
service (seeds 000-002), from a pcap or a live AF_PACKET capture (docs/appmon.md)."""
