"""The analyser's compiled fast path (appmon/_fastpath.c): the common frame of an HTTP/1.x
connection taken in C, on the same objects the Python path keeps its state in, with the same
effect; every other frame goes through ``Analyser.ingest``. Optional: built by ``pip install -e
.`` (setup.py); without a compiler the analyser runs in Python alone, a third to a quarter as
fast (docs/appmon.md, "Speed"), and tests/appmon/test_fastpath.py fails where the tests run.
"""

from __future__ import annotations

from cosample.appmon.connections import Connection, ConnectionTable
from cosample.appmon.http import BODY, CHUNK_SIZE, DEAD, HEAD, METHODS, UNTIL_CLOSE, HttpParser
from cosample.appmon.streams import HalfStream

try:
    from cosample.appmon._fastpath import Engine
except ImportError:  # built without a compiler: the Python path alone
    Engine = None


def engine(table: ConnectionTable, link: int):
    """The compiled fast path over ``table``'s connections (frames of link type ``link``), or
    None when it was not built."""
    if Engine is None:
        return None
    return Engine(
        table,
        link,
        Connection,
        HalfStream,
        HttpParser,
        (HEAD, BODY, CHUNK_SIZE, UNTIL_CLOSE, DEAD),
        METHODS,
    )
