"""Live frames from an interface: an AF_PACKET socket with a classic BPF filter in the kernel.

The kernel runs the filter on every frame and copies to this process only TCP segments (of the
``ports`` given, when given), so the analyser's Python never sees the rest of the interface's
traffic. Why AF_PACKET and not a capture library: docs/dependencies.md ("Capture"). Frames carry
the kernel's receive time (``SO_TIMESTAMPNS``), not the time Python read them: service times do
not include this process's scheduling delays. The kernel's own drops (receive buffer full) are
read with ``PACKET_STATISTICS`` and reported as ``kernel_drops``. Needs root (CAP_NET_RAW).
"""

from __future__ import annotations

import ctypes
import socket
import struct

from cosample.appmon.errors import AppmonError

ETH_P_ALL, ETH_P_IP, ETH_P_IPV6 = 0x0003, 0x0800, 0x86DD
SO_ATTACH_FILTER, SO_TIMESTAMPNS, SOL_PACKET, PACKET_STATISTICS = 26, 35, 263, 6
PACKET_OUTGOING = 4
#: Bytes of a frame the filter lets through (the kernel's default maximum: whole frames).
SNAPLEN = 262144
#: Largest frame read (GRO can hand a packet socket up to 64 KiB at once).
FRAME_BUFFER = 65536 + 256

# classic BPF opcodes
LDH_ABS, LDB_ABS, LDXB_MSH, LDH_IND = 0x28, 0x30, 0xB1, 0x48
JEQ, JSET, RET = 0x15, 0x45, 0x06


def tcp_filter(ports: frozenset[int] = frozenset()) -> list[tuple[int, int, int, int]]:
    """A classic BPF program (``code, jt, jf, k``) accepting IPv4 (unfragmented) and IPv6 TCP
    frames on Ethernet, with a source or destination port in ``ports`` when that is not empty."""
    program: list = []  # entries: (code, true label or 0, false label or 0, k)

    def emit(code, k=0, true=0, false=0):
        program.append([code, true, false, k])

    port_list = sorted(ports)

    def ports_from():  # after a port is loaded: accept if it is one of ours
        for port in port_list:
            emit(JEQ, port, "accept", 0)

    emit(LDH_ABS, 12)
    emit(JEQ, ETH_P_IP, 0, "ipv6")
    emit(LDB_ABS, 23)
    emit(JEQ, 6, 0, "drop")
    emit(LDH_ABS, 20)
    emit(JSET, 0x1FFF, "drop", 0)
    if port_list:
        emit(LDXB_MSH, 14)
        emit(LDH_IND, 14)
        ports_from()
        emit(LDH_IND, 16)
        ports_from()
        emit(RET, 0)
    else:
        emit(RET, SNAPLEN)
    labels = {"ipv6": len(program)}
    emit(JEQ, ETH_P_IPV6, 0, "drop")
    emit(LDB_ABS, 20)
    emit(JEQ, 6, 0, "drop")
    if port_list:
        emit(LDH_ABS, 54)
        ports_from()
        emit(LDH_ABS, 56)
        ports_from()
    else:
        emit(RET, SNAPLEN)
    labels["drop"] = len(program)
    emit(RET, 0)
    labels["accept"] = len(program)
    emit(RET, SNAPLEN)
    resolved = []
    for index, (code, true, false, k) in enumerate(program):
        jump = [
            labels[target] - index - 1 if isinstance(target, str) else target
            for target in (true, false)
        ]
        if code in (JEQ, JSET) and not all(0 <= offset <= 255 for offset in jump):
            raise AppmonError(f"BPF filter: too many ports ({len(port_list)}) for one program")
        resolved.append((code, *jump, k))
    return resolved


class PacketSocket:
    """Frames of one interface, filtered in the kernel; ``receive`` never blocks."""

    def __init__(
        self, interface: str, ports: frozenset[int] = frozenset(), receive_buffer: int = 32 << 20
    ) -> None:
        self.interface = interface
        self.kernel_drops = 0
        self.loopback = interface == "lo"
        try:
            sock = socket.socket(
                socket.AF_PACKET, socket.SOCK_RAW, 0
            )  # no frames before the filter
        except PermissionError:
            raise AppmonError(
                f"--interface {interface}: a packet socket needs root (CAP_NET_RAW)"
            ) from None
        try:
            program = tcp_filter(ports)
            code = b"".join(struct.pack("HBBI", *instruction) for instruction in program)
            self._filter = ctypes.create_string_buffer(code)
            fprog = struct.pack("HL", len(program), ctypes.addressof(self._filter))
            sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            try:
                sock.setsockopt(
                    socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), receive_buffer
                )
            except OSError:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
            sock.bind((interface, ETH_P_ALL))
        except OSError as exc:
            sock.close()
            raise AppmonError(
                f"--interface {interface}: cannot capture ({exc.strerror or exc})"
            ) from None
        sock.setblocking(False)
        self.socket = sock
        self._buffer = bytearray(FRAME_BUFFER)
        self._view = memoryview(self._buffer)
        self._ancillary = socket.CMSG_SPACE(16)

    def fileno(self) -> int:
        return self.socket.fileno()

    def receive(self) -> tuple[bytes, float] | None:
        """The next frame and its kernel time, or None when nothing is waiting."""
        while True:
            try:
                size, ancillary, _, address = self.socket.recvmsg_into(
                    [self._buffer], self._ancillary
                )
            except (BlockingIOError, InterruptedError):
                return None
            if self.loopback and address[2] == PACKET_OUTGOING:
                continue  # on lo every packet is seen leaving and arriving: keep one
            when = 0.0
            for level, kind, data in ancillary:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
                    seconds, nanoseconds = struct.unpack("qq", data[:16])
                    when = seconds + nanoseconds * 1e-9
            return bytes(self._view[:size]), when

    def statistics(self) -> int:
        """Frames the kernel dropped since the socket opened (its counters reset when read)."""
        packets, drops = struct.unpack(
            "II", self.socket.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
        )
        self.kernel_drops += drops
        return self.kernel_drops

    def close(self) -> None:
        self.socket.close()
