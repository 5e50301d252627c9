"""The classic pcap file header (``tcpdump -w``), read by the collector's and the application
monitor's replays: its magic numbers (byte order and time unit), and what is wrong with a file
that does not start with a whole one, said as plainly as it is."""

from __future__ import annotations

#: magic -> (struct byte order, seconds per timestamp fraction unit)
MAGIC = {
    b"\xd4\xc3\xb2\xa1": ("<", 1e-6),
    b"\xa1\xb2\xc3\xd4": (">", 1e-6),
    b"\x4d\x3c\xb2\xa1": ("<", 1e-9),
    b"\xa1\xb2\x3c\x4d": (">", 1e-9),
}
PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"
HEADER_BYTES = 24


def header_problem(head: bytes) -> str | None:
    """Why the file whose first bytes are ``head`` (up to ``HEADER_BYTES``) is no pcap capture
    to read, or None when it starts with a whole pcap header (pcapng: the caller's hint)."""
    if not head:
        return "empty file (0 bytes), not a pcap capture"
    if len(head) < HEADER_BYTES and any(magic.startswith(head[:4]) for magic in MAGIC):
        return (
            f"truncated: {len(head)} bytes, shorter than a pcap file header ({HEADER_BYTES} bytes)"
        )
    if head[:4] not in MAGIC:
        return f"not a pcap capture (it starts with {head[:4].hex()}, no pcap magic number)"
    return None
