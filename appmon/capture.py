"""Live frames from an interface: an AF_PACKET socket with a classic BPF filter in the kernel,
read through a memory-mapped ring (``PACKET_RX_RING``, ``TPACKET_V3``), as libpcap reads it.

The kernel runs the filter on every frame and writes only TCP segments (of the ``ports`` given,
when given) into the ring, so the analyser's Python never sees the rest of the interface's
traffic. The ring is a row of blocks the kernel fills with frames and hands over whole (when
full, or ``RETIRE_MS`` after its first frame); ``PacketRing.batch`` copies the frames of every
block handed over and gives the blocks back: no system call per frame, one ``select`` per
batch. Why this and not a capture library: docs/dependencies.md ("Capture"). Frames carry the
kernel's receive time (the ring's frame header), not the time Python read them: service times
do not include this process's scheduling delays. The kernel's own counts (``PACKET_STATISTICS``:
frames its filter passed, and those dropped because the ring was full) are read by
``statistics``. Needs root (CAP_NET_RAW).
"""

from __future__ import annotations

import ctypes
import mmap
import socket
import struct

from cosample.appmon.errors import AppmonError

ETH_P_ALL, ETH_P_IP, ETH_P_IPV6 = 0x0003, 0x0800, 0x86DD
SO_ATTACH_FILTER, SOL_PACKET, PACKET_STATISTICS = 26, 263, 6
# <linux/if_packet.h>
PACKET_RX_RING, PACKET_VERSION, PACKET_IGNORE_OUTGOING, TPACKET_V3 = 5, 10, 23, 2
TP_STATUS_KERNEL, TP_STATUS_USER = 0, 1
#: Bytes of a frame the filter lets through (the kernel's default maximum: whole frames; the
#: ring keeps at most a block's worth, far more than GRO's 64 KiB).
SNAPLEN = 262144
#: One block of the ring (a power of two of pages): about 700 frames of a web service.
BLOCK_BYTES = 1 << 18
#: A block is handed over this long after it opened even when not full (milliseconds): a quiet
#: link's frames still reach the windows within a tick. A block handed over early is mostly
#: empty, so the ring holds at least ``blocks x RETIRE_MS`` of traffic at any rate (with 20 ms
#: and 32 blocks, 0.64 s: a loaded machine's scheduling pauses dropped frames at rates the
#: analyser keeps up with otherwise, docs/results/appmon.md "Where the live analyser saturates").
RETIRE_MS = 100
#: ``struct tpacket_req3``: block size, blocks, frame size, frames, retire timeout, private
#: bytes, features.
_REQ3 = struct.Struct("7I")
#: ``struct tpacket_block_desc`` (version, offset to private, then ``tpacket_hdr_v1``): status,
#: frames, offset to the first; read at the block's offset 8.
_BLOCK = struct.Struct("III")
#: ``struct tpacket3_hdr``: next offset, seconds, nanoseconds, bytes kept, wire length,
#: status, offset of the link header.
_FRAME = struct.Struct("IIIIIIH")
_RELEASE = struct.pack("I", TP_STATUS_KERNEL)

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


class PacketRing:
    """Frames of one interface, filtered in the kernel, through a ``ring_bytes`` ring of
    ``BLOCK_BYTES`` blocks; ``batch`` never blocks (``select`` on ``fileno`` waits)."""

    def __init__(
        self, interface: str, ports: frozenset[int] = frozenset(), ring_bytes: int = 64 << 20
    ) -> None:
        self.interface = interface
        self.kernel_frames = self.kernel_drops = 0
        self.blocks = max(2, ring_bytes // BLOCK_BYTES)
        try:
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # no frames before filter
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
            sock.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V3)
            frame_size = 2048  # V3 packs frames of any size; the kernel checks only the arithmetic
            sock.setsockopt(
                SOL_PACKET,
                PACKET_RX_RING,
                _REQ3.pack(
                    BLOCK_BYTES,
                    self.blocks,
                    frame_size,
                    self.blocks * BLOCK_BYTES // frame_size,
                    RETIRE_MS,
                    0,
                    0,
                ),
            )
            if interface == "lo":  # every packet is seen leaving and arriving: keep one
                sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            self.ring = mmap.mmap(sock.fileno(), self.blocks * BLOCK_BYTES)
            sock.bind((interface, ETH_P_ALL))
        except OSError as exc:
            sock.close()
            raise AppmonError(
                f"--interface {interface}: cannot capture ({exc.strerror or exc})"
            ) from None
        self.socket = sock
        self._next = 0  # the block the kernel hands over next

    def fileno(self) -> int:
        return self.socket.fileno()

    def batch(self, max_blocks: int | None = None) -> list[tuple[float, bytes]]:
        """``(kernel receive time, frame)`` of every block handed over (at most ``max_blocks``),
        in arrival order (``Analyser.ingest_all``'s input); the blocks go back to the kernel
        before this returns."""
        ring, blocks = self.ring, self.blocks
        out: list[tuple[float, bytes]] = []
        append, frame_at, block_at = out.append, _FRAME.unpack_from, _BLOCK.unpack_from
        for _ in range(blocks if max_blocks is None else min(max_blocks, blocks)):
            base = self._next * BLOCK_BYTES
            status, count, offset = block_at(ring, base + 8)
            if not status & TP_STATUS_USER:
                break
            at = base + offset
            for _ in range(count):
                following, seconds, nanoseconds, kept, _, _, mac = frame_at(ring, at)
                start = at + mac
                append((seconds + nanoseconds * 1e-9, ring[start : start + kept]))
                at += following
            ring[base + 8 : base + 12] = _RELEASE
            self._next = (self._next + 1) % blocks
        return out

    def statistics(self) -> tuple[int, int]:
        """Frames the kernel's filter passed and frames it dropped (the ring was full), since
        the socket opened (the kernel's counters reset when read)."""
        packets, drops, _ = struct.unpack(
            "III", self.socket.getsockopt(SOL_PACKET, PACKET_STATISTICS, 12)
        )
        self.kernel_frames += packets  # TPACKET_V3 counts the dropped frames in packets too
        self.kernel_drops += drops
        return self.kernel_frames, self.kernel_drops

    def close(self) -> None:
        self.ring.close()
        self.socket.close()
