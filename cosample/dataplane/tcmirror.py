"""Probabilistic per-packet mirrors with stock tc: a classic-BPF random classifier plus ``mirred``.

OVS has no sampled (1-in-N) mirror, so the kernel does it (docs/ovs-facts.md): on a port's
``clsact`` hook, a classic-BPF program loads the kernel's per-packet random number and matches
when it is below a threshold ``T``, i.e. with probability ``T / 2^32``; the matching packet is
copied (``mirred egress mirror``) to a target device and continues on its way.

Several targets form a chain tried in ``prio`` order where the first match ends classification,
so conditional probabilities ``q_k = s_k / (1 - s_1 - ... - s_{k-1})`` give mutually exclusive
shares ``s_k`` (no packet is mirrored twice). The same ``mirred`` with a classifier given as
``tcpdump -ddd`` output copies an application service's segments (``selective_filter_argv``:
the application rig's kernel mirror, docs/appmon-mechanisms.md). Everything here is pure: it
builds bytecode strings and ``tc`` argument lists; running them is the caller's job
(``cosample.dataplane.run.run``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from cosample.errors import CosampleError
from cosample.validation import InterfaceName, validate

#: Number of values of the kernel's 32-bit random number (``SKF_AD_RANDOM``).
RANDOM_RANGE = 2**32
#: ``BPF_LD|BPF_W|BPF_ABS`` of ``SKF_AD_OFF + SKF_AD_RANDOM`` (-0x1000 + 56, as unsigned 32-bit).
_LOAD_RANDOM = "32 0 0 4294963256"
#: ``BPF_RET|BPF_K`` with all bits set: match, keep the whole packet.
_RETURN_MATCH = "6 0 0 4294967295"
_RETURN_NO_MATCH = "6 0 0 0"
#: Tolerance on a sum of shares exceeding 1 through rounding.
_SHARE_SLACK = 1e-9
#: tc priorities of the agents' kernel application mirror (``kernel_mirror``) on both hooks of
#: a VM's port: [KERNEL_MIRROR_PRIO_BASE, +KERNEL_MIRROR_PRIO_COUNT), one handle. Below the
#: sFlow mirror chain's range (``cosample.agents.state.PRIO_BASE``, ingress), so they are tried
#: first; their ``mirred`` ends in ``continue`` (``selective_filter_argv``), so every packet
#: still reaches the sFlow chain, whose first match ends classification.
KERNEL_MIRROR_PRIO_BASE, KERNEL_MIRROR_PRIO_COUNT, KERNEL_MIRROR_HANDLE = 0xBF00, 256, 1
#: The agents' mark on a kernel mirror filter: its mirred cookie starts with these bytes
#: ("cosasapp"); the rest is a hash of what the filter does (``agents.appmon_state``).
KERNEL_MIRROR_COOKIE_TAG = "636f736173617070"


class TcMirrorError(CosampleError):
    """A probability, share list or tc argument that cannot make a valid mirror filter."""


def random_threshold(probability: float) -> int:
    """``T`` such that ``rand < T`` (rand uniform on 0..2^32-1) holds with ``probability``.

    ``T = round(p * 2^32)`` clamped to ``2^32 - 1`` (the largest a BPF constant can hold); use
    ``bpf_random_bytecode`` for p = 1, which matches always without comparing.
    """
    p = _probability(probability, "probability")
    return min(round(p * RANDOM_RANGE), RANDOM_RANGE - 1)


def bpf_random_bytecode(probability: float) -> str:
    """The ``tc ... bpf bytecode`` string that matches each packet with ``probability``.

    p = 1 gives a one-instruction always-match program, p = 0 a never-match one; otherwise
    ``ld rand; jge T -> no match; match``.
    """
    p = _probability(probability, "probability")
    if p >= 1.0:
        return f"1,{_RETURN_MATCH}"
    if p <= 0.0:
        return f"1,{_RETURN_NO_MATCH}"
    return f"4,{_LOAD_RANDOM},53 1 0 {random_threshold(p)},{_RETURN_MATCH},{_RETURN_NO_MATCH}"


def chain_thresholds(shares: Sequence[float]) -> tuple[float, ...]:
    """Conditional match probabilities ``q_k`` giving mutually exclusive shares ``s_k``.

    Filter k (tried after filters 1..k-1 did not match) must match with
    ``q_k = s_k / (1 - s_1 - ... - s_{k-1})``; feed each ``q_k`` to ``bpf_random_bytecode``.
    Shares must lie in [0, 1] and sum to at most 1. Once the shares are used up, ``q`` is 0.
    """
    values = [_probability(share, f"shares[{k}]") for k, share in enumerate(shares)]
    total = math.fsum(values)
    if total > 1.0 + _SHARE_SLACK:
        raise TcMirrorError(f"shares sum to {total:g} > 1: a packet can be mirrored at most once")
    probabilities, used = [], 0.0
    for share in values:
        remaining = 1.0 - used
        probabilities.append(0.0 if remaining <= _SHARE_SLACK else min(1.0, share / remaining))
        used += share
    return tuple(probabilities)


def match_probability(bytecode: str) -> float:
    """The match probability of a bytecode made by ``bpf_random_bytecode`` (for checks and tests)."""
    parts = bytecode.split(",")
    if parts == ["1", _RETURN_MATCH]:
        return 1.0
    if parts == ["1", _RETURN_NO_MATCH]:
        return 0.0
    if (
        len(parts) == 5
        and parts[0] == "4"
        and parts[1] == _LOAD_RANDOM
        and parts[2].startswith("53 1 0 ")
    ):
        return int(parts[2].split()[3]) / RANDOM_RANGE
    raise TcMirrorError(f"not a random-mirror bytecode: {bytecode!r}")


# tc argument lists -----------------------------------------------------------------------------
def _tc(netns: str | None) -> list[str]:
    return ["tc", "-n", netns] if netns else ["tc"]


def clsact_add_argv(device: str, *, netns: str | None = None) -> list[str]:
    """Attach the ``clsact`` qdisc (ingress/egress hooks); fails if one is already there."""
    return [*_tc(netns), "qdisc", "add", "dev", _device(device), "clsact"]


def clsact_delete_argv(device: str, *, netns: str | None = None) -> list[str]:
    """Remove ``clsact`` and with it every filter on both hooks of ``device``."""
    return [*_tc(netns), "qdisc", "del", "dev", _device(device), "clsact"]


def mirror_filter_argv(
    device: str,
    target: str,
    probability: float,
    *,
    prio: int,
    handle: int = 1,
    direction: str = "ingress",
    netns: str | None = None,
    cookie: str | None = None,
) -> list[str]:
    """``tc filter replace`` mirroring each packet on ``device`` to ``target`` with ``probability``.

    ``replace`` with a fixed ``prio``/``handle`` is idempotent: re-running it updates the
    threshold in place. ``direction`` ``ingress`` on the host end of a VM's veth sees what the
    VM sends. ``cookie`` (hex, up to 16 bytes) is stored with the mirred action and shown by
    ``tc -j filter show``: an owner's mark on the filter.
    """
    argv = [
        *_tc(netns),
        "filter",
        "replace",
        "dev",
        _device(device),
        _direction(direction),
        "protocol",
        "all",
        "prio",
        str(_positive_int(prio, "prio")),
        "handle",
        str(_positive_int(handle, "handle")),
        "bpf",
        "bytecode",
        bpf_random_bytecode(probability),
        "action",
        "mirred",
        "egress",
        "mirror",
        "dev",
        _device(target),
    ]
    if cookie is not None:
        if not (
            isinstance(cookie, str)
            and 2 <= len(cookie) <= 32
            and len(cookie) % 2 == 0
            and all(ch in "0123456789abcdef" for ch in cookie)
        ):
            raise TcMirrorError(f"cookie: expected 1-16 bytes in lower-case hex, got {cookie!r}")
        argv += ["cookie", cookie]
    return argv


def filter_delete_argv(
    device: str, *, prio: int, handle: int = 1, direction: str = "ingress", netns: str | None = None
) -> list[str]:
    """Delete exactly the filter at ``prio``/``handle`` that ``mirror_filter_argv`` created."""
    return [
        *_tc(netns),
        "filter",
        "del",
        "dev",
        _device(device),
        _direction(direction),
        "protocol",
        "all",
        "prio",
        str(_positive_int(prio, "prio")),
        "handle",
        str(_positive_int(handle, "handle")),
        "bpf",
    ]


def chain_filter_argvs(
    device: str,
    targets: Sequence[str],
    shares: Sequence[float],
    *,
    first_prio: int,
    direction: str = "ingress",
    netns: str | None = None,
) -> list[list[str]]:
    """One ``mirror_filter_argv`` per target at consecutive prios, giving exclusive ``shares``."""
    if len(targets) != len(shares):
        raise TcMirrorError(f"{len(targets)} targets but {len(shares)} shares")
    return [
        mirror_filter_argv(device, target, q, prio=first_prio + k, direction=direction, netns=netns)
        for k, (target, q) in enumerate(zip(targets, chain_thresholds(shares)))
    ]


def bytecode_from_ddd(text: str) -> str:
    """tc's ``bytecode`` string from ``tcpdump -y EN10MB -ddd EXPR`` (a count line, then one
    ``code jt jf k`` per line): a libpcap filter as a classifier, e.g. the sniffer's own filter
    (``agents.appmon_state.bpf_filter``), so a tc mirror copies what the sniffer would read.
    cls_bpf runs a classic program from the Ethernet header on both hooks."""
    lines = [line.split() for line in text.strip().splitlines()]
    try:
        count = int(lines[0][0])
        program = [tuple(int(field) for field in line) for line in lines[1:]]
    except (IndexError, ValueError):
        raise TcMirrorError(f"not tcpdump -ddd output: {text[:80]!r}") from None
    if count != len(program) or not 0 < count <= 4096 or any(len(i) != 4 for i in program):
        raise TcMirrorError(
            f"tcpdump -ddd output: {count} instructions announced, {len(program)} read"
        )
    return ",".join([str(count), *(" ".join(str(f) for f in i) for i in program)])


def selective_filter_argv(
    device: str,
    target: str,
    bytecode: str,
    *,
    prio: int,
    direction: str,
    netns: str | None = None,
    cookie: str | None = None,
    handle: int = 1,
    then_continue: bool = False,
) -> list[str]:
    """``tc filter replace`` copying the packets ``bytecode`` matches on one hook of ``device``
    to ``target`` (the kernel mirror of an application service: its copies leave at the
    kernel's receive or transmit time, not after the switch's queue). ``then_continue``: the
    action's verdict is ``continue``, so classification goes on to the filters after it (a
    filter whose action ends in ``pipe``, mirred's default, ends it)."""
    argv = mirror_filter_argv(
        device, target, 1.0, prio=prio, handle=handle, direction=direction, netns=netns
    )
    argv[argv.index("bytecode") + 1] = bytecode
    if then_continue:
        argv.append("continue")
    if cookie is not None:
        argv += mirror_filter_argv(device, target, 1.0, prio=prio, cookie=cookie)[-2:]
    return argv


# validation ----------------------------------------------------------------------------------
def _probability(value: float, name: str) -> float:
    if isinstance(value, bool):
        raise TcMirrorError(f"{name}: expected a number in [0, 1], got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TcMirrorError(f"{name}: expected a number in [0, 1], got {value!r}") from None
    if not 0.0 <= number <= 1.0:  # also rejects NaN
        raise TcMirrorError(f"{name}: must be in [0, 1], got {value!r}")
    return number


def _positive_int(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 0xFFFF:
        raise TcMirrorError(f"{name}: expected an integer in 1..65535, got {value!r}")
    return value


def _direction(direction: str) -> str:
    if direction not in ("ingress", "egress"):
        raise TcMirrorError(f"direction: expected 'ingress' or 'egress', got {direction!r}")
    return direction


def _device(name: str) -> str:
    """``name`` if the kernel accepts it as an interface name (``cosample.validation.InterfaceName``)."""
    return validate(InterfaceName, name, where="device", error=TcMirrorError)
