"""The compact records' keys: one function every party derives a pair's key with, and the one
format of a key file (the site's secret, a pair's key). Standard library only: the agents
derive and write the keys, ``cosample appmon run`` reads them (docs/appmon.md, "Who may send
records, and what one datagram can do").

A key file holds at least ``KEY_BYTES`` bytes as hexadecimal text (``openssl rand -hex 32``)
and is readable by its owner only.
"""

from __future__ import annotations

import hashlib
import hmac
import os

#: Bytes of a pair's key (and at least of the site's secret it is derived from).
KEY_BYTES = 32


def pair_key(secret: bytes, sender: str, receiver: str) -> bytes:
    """The key of the records ``sender``'s sniffer sends ``receiver``: HMAC-SHA256 of the two
    host names under the site's record secret (both agents derive it; no other pair's)."""
    label = b"cosample appmon records\0" + sender.encode() + b"\0" + receiver.encode()
    return hmac.digest(secret, label, hashlib.sha256)


def read_key(path: str, what: str) -> bytes:
    """The key in file ``path``; ``ValueError`` naming ``what`` and the file otherwise."""
    try:
        with open(path, "rb") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            text = handle.read(4096)
    except OSError as exc:
        raise ValueError(f"{what} {path}: cannot read ({exc.strerror})") from None
    if mode & 0o077:
        raise ValueError(f"{what} {path}: readable by others (mode {mode & 0o777:o}; chmod 600)")
    try:
        key = bytes.fromhex(text.decode("ascii").strip())
    except ValueError:
        key = b""
    if len(key) < KEY_BYTES:
        raise ValueError(
            f"{what} {path}: expected at least {KEY_BYTES} bytes as hexadecimal text "
            "(openssl rand -hex 32)"
        )
    return key
