"""The servers' fields a plan hands through to their agents (``AGENT_FIELDS``), as columns.

A description may give each server a bridge, a tunnel address, VM ports...; the planner does not
read them, only copies them into each server's plan entry. Kept as columns (one list per field,
None where a server does not give it): a million small dicts would be a quarter of a gigabyte,
and the plan writer (``planfile``) takes a column every server gives as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from cosample.planner.description import AGENT_FIELDS


def any_given(values: list[Any]) -> bool:
    """Whether any server gives this field (a column with None where absent)."""
    return values.count(None) != len(values)


class ExtraColumns(Mapping):
    """The servers' ``AGENT_FIELDS`` as columns (None: not given), read as the mapping
    ``{name: {field: value}}`` of the servers that give any: a million small dicts are a
    quarter of a gigabyte, and the plan writer takes a column every server gives as it is."""

    def __init__(self, names: tuple[str, ...], columns: dict[str, list[Any]]) -> None:
        self.names = names
        self.columns = columns
        self._positions: dict[str, int] | None = None

    def __getitem__(self, name: str) -> dict[str, Any]:
        if self._positions is None:
            self._positions = dict(zip(self.names, range(len(self.names))))
        k = self._positions[name]
        extra = {key: column[k] for key, column in self.columns.items() if column[k] is not None}
        if not extra:
            raise KeyError(name)
        return extra

    def __iter__(self) -> Iterator[str]:
        given = [column for column in self.columns.values()]
        return (
            name
            for k, name in enumerate(self.names)
            if any(column[k] is not None for column in given)
        )

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __bool__(self) -> bool:  # without counting
        return any(column.count(None) != len(column) for column in self.columns.values())

    @classmethod
    def given(cls, names: tuple[str, ...], servers: Mapping[str, list[Any]]) -> "ExtraColumns":
        """Per server, the ``AGENT_FIELDS`` a description's columns give (handed through to its
        plan entry)."""
        return cls(names, {key: servers[key] for key in AGENT_FIELDS if any_given(servers[key])})

    @classmethod
    def of(
        cls, names: tuple[str, ...], extras: Mapping[str, Mapping[str, Any]]
    ) -> "ExtraColumns | Mapping[str, Mapping[str, Any]]":
        """``extras`` (``{name: {field: value}}``) as columns of ``names``; ``extras`` itself
        if a value is None (columns read None as "not given") or a name is not in ``names``."""
        keys = sorted({key for extra in extras.values() for key in extra})
        if len(extras) > len(names) or any(
            value is None for extra in extras.values() for value in extra.values()
        ):
            return extras
        rows = [extras.get(name) or {} for name in names]
        if sum(1 for row in rows if row) != len(extras):
            return extras
        return cls(names, {key: [row.get(key) for row in rows] for key in keys})

    def complete(self) -> dict[str, list[Any]]:
        """The columns every server gives."""
        return {key: column for key, column in self.columns.items() if None not in column}

    def without(self, keys: Iterable[str]) -> "ExtraColumns":
        return ExtraColumns(
            self.names, {key: column for key, column in self.columns.items() if key not in keys}
        )
