"""Reading ``:status`` from an HPACK header block without decoding all of it (RFC 7541).

The ``hpack`` library decodes every field of a block, Huffman strings in pure Python: on h2c
traffic that was most of the analyser's time. The analyser needs one field, and the dynamic
table only stays in step if every block that changes it is decoded. So ``walk`` steps over a
block's representations (lengths only), reads ``:status`` where it stands (a static entry, a
literal with the static name, or an entry of the library's dynamic table), and says whether the
block changes the table (an incremental-indexing literal, a size update): those, and only
those, go to the library's decoder. Pure; raises ``ValueError`` on a malformed block.
"""

from __future__ import annotations

from hpack.huffman_table import decode_huffman

#: The static table's ``:status`` entries (RFC 7541 appendix A); index 8 names ``:status``.
STATIC_STATUS = {8: 200, 9: 204, 10: 206, 11: 304, 12: 400, 13: 404, 14: 500}
STATUS_NAME, STATIC_LENGTH = 8, 61


def integer(block: bytes, at: int, bits: int) -> tuple[int, int]:
    """An HPACK integer with a ``bits``-bit prefix at ``at``: (value, next position)."""
    if at >= len(block):
        raise ValueError("integer past the block")
    mask = (1 << bits) - 1
    value, at = block[at] & mask, at + 1
    if value < mask:
        return value, at
    shift = 0
    while at < len(block) and shift < 28:
        byte, at = block[at], at + 1
        value += (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at
    raise ValueError("integer runs past the block")


def _string(block: bytes, at: int) -> tuple[bytes, bool, int]:
    """A string literal: (its raw bytes, whether Huffman-coded, next position)."""
    huffman = bool(block[at] & 0x80) if at < len(block) else False
    length, at = integer(block, at, 7)
    if at + length > len(block):
        raise ValueError("string past the block")
    return block[at : at + length], huffman, at + length


def _status(value: bytes) -> int | None:
    return int(value) if len(value) == 3 and value.isdigit() and 100 <= int(value) <= 599 else None


def _named(index: int, table) -> bool:
    """Whether the table entry ``index`` is named ``:status``."""
    if index == STATUS_NAME or 8 <= index <= 14:
        return True
    return (
        index > STATIC_LENGTH and table is not None and table.get_by_index(index)[0] == b":status"
    )


def walk(block: bytes, table=None) -> tuple[int | None, bool]:
    """(``:status`` or None, whether the block changes the dynamic table). ``table``: the
    library's ``HeaderTable`` in step with the server's (None: dynamic entries are unknown)."""
    at, status, changes = 0, None, False
    while at < len(block):
        byte = block[at]
        if byte & 0x80:  # indexed field
            index, at = integer(block, at, 7)
            if status is None:
                if index in STATIC_STATUS:
                    status = STATIC_STATUS[index]
                elif index > STATIC_LENGTH and table is not None:
                    name, value = table.get_by_index(index)
                    status = _status(value) if name == b":status" else None
            continue
        if byte & 0xE0 == 0x20:  # dynamic table size update
            _, at = integer(block, at, 5)
            changes = True
            continue
        indexing = byte & 0xC0 == 0x40
        changes = changes or indexing
        index, at = integer(block, at, 6 if indexing else 4)
        if index == 0:
            _, _, at = _string(block, at)  # a literal name (never :status in practice)
        raw, huffman, at = _string(block, at)
        if status is None and index and _named(index, table):
            status = _status(decode_huffman(raw) if huffman else raw)
    return status, changes


def first_status(block: bytes) -> int | None:
    """``:status`` without the dynamic table (static entries and literals only)."""
    try:
        return walk(block)[0]
    except (ValueError, IndexError):
        return None
