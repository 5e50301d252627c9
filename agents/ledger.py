"""The agent's ledger of what it owns on the host, wherever it is, kept in the state directory.

Some objects cannot carry an owner mark at the moment they are made, or live where the agent
would not look again: a VXLAN device between ``ip link add`` and tagging its alias, a ``clsact``
qdisc (no tag of its own), OVSDB rows and flows on a bridge the plan no longer names. Each is
written into the ledger *before* it is created and struck out only after it is gone, so a run
killed at any point leaves nothing the next run cannot find. Objects not marked and not in the
ledger are someone else's and are never changed.

The file is ``owned.json`` (mode 0600): ``{"bridges": [...], "devices": [...], "clsacts": [...]}``.
"""

from __future__ import annotations

import json
from pathlib import Path

from cosample.agents.errors import HostError
from cosample.files import write_bytes_atomic

LEDGER_FILE = "owned.json"
KINDS = ("bridges", "devices", "clsacts", "appmon_devices", "kernel_mirrors")
#: Earlier agents kept only their clsact qdiscs, in this file beside the ledger; read once.
LEGACY_CLSACT_FILE = "clsact-owned.json"


def private_dir(path: str | Path) -> Path:
    """The state directory, created if needed, readable by its owner only (0700)."""
    path = Path(path)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_mode & 0o077:
        path.chmod(0o700)
    return path


#: A temporary file of an atomic write (``cosample.files``: ``.NAME.XXXX.tmp``) older than this
#: was left by a killed run: a write in progress lasts milliseconds (and ``agent apply --once``
#: may write beside a running daemon, so fresh ones are left alone).
STALE_TEMPORARY_S = 60.0


def remove_stale_temporaries(
    directory: str | Path, now: float, older_than_s: float = STALE_TEMPORARY_S
) -> list[str]:
    """Remove what killed atomic writes left in the state directory; returns the names."""
    removed = []
    for path in Path(directory).glob(".*.tmp"):
        try:
            if now - path.lstat().st_mtime > older_than_s:
                path.unlink()
                removed.append(path.name)
        except OSError:
            continue
    return removed


class Ledger:
    """Names of owned things by kind, persisted atomically on every change."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def names(self, kind: str) -> set[str]:
        return set(self._read()[kind])

    def add(self, kind: str, name: str) -> None:
        entries = self._read()
        if name not in entries[kind]:
            entries[kind] = sorted({*entries[kind], name})
            self._write(entries)

    def discard(self, kind: str, name: str) -> None:
        entries = self._read()
        if name in entries[kind]:
            entries[kind] = sorted(set(entries[kind]) - {name})
            self._write(entries)

    def _read(self) -> dict[str, list[str]]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {kind: [] for kind in KINDS} | {"clsacts": self._legacy_clsacts()}
        except (OSError, ValueError) as exc:
            raise HostError(
                f"{self.path}: unreadable ledger of owned objects ({exc}); "
                f"restore it or run 'cosample agent remove'"
            ) from None
        if not isinstance(data, dict):
            raise HostError(f"{self.path}: unreadable ledger of owned objects (not an object)")
        return {kind: [str(n) for n in data.get(kind, []) if isinstance(n, str)] for kind in KINDS}

    def _legacy_clsacts(self) -> list[str]:
        try:
            names = json.loads((self.path.parent / LEGACY_CLSACT_FILE).read_text())
        except (OSError, ValueError):
            return []
        return sorted(n for n in names if isinstance(n, str)) if isinstance(names, list) else []

    def _write(self, entries: dict[str, list[str]]) -> None:
        text = json.dumps(entries, sort_keys=True) + "\n"
        private_dir(self.path.parent)
        write_bytes_atomic(self.path, text.encode(), mode=0o600)
