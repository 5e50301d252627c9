"""IPFIX templates kept across restarts in the collector's ``--state-dir``.

OVS sends its templates when its exporter starts and then every 600 s: a collector restarted
in between could read none of a ``sample`` host's records for up to ten minutes. So the
daemon writes the templates it has learned (each with the time it was last sent, which expiry
keeps counting from) to ``STATE_DIR/ipfix/templates.json`` whenever they change, and reads
them back at start. The file is the collector's own state, but it is read as input: declared
as pydantic models (one error naming the field), at most ``MAX_FILE_BYTES``, each template's
fields checked against the decoder's element table; a file refused is logged and the
collector starts without it (a restart must never be worse than a first start). Written
atomically, the folder 0700 and the file 0600 (templates name the exporters).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import orjson
from pydantic import Field, model_validator

from cosample.collector.errors import CollectorError
from cosample.collector.ipfix import (
    ELEMENTS,
    FIRST_DATA_SET,
    MAX_SESSIONS,
    MAX_TEMPLATES,
    VARIABLE_LENGTH,
    Template,
    Templates,
)
from cosample.files import write_bytes_atomic
from cosample.validation import IpAddress, Strict, validate

FOLDER, FILE = "ipfix", "templates.json"
FORMAT = "cosample.ipfix-templates"
#: A file larger than this is refused unread (4,096 sessions of a few templates fit well under).
MAX_FILE_BYTES = 16 << 20
_NAMED = {name: kind for name, kind in ELEMENTS.values()}
_SKIPPED_KIND = 0  # an enterprise element: skipped by its length, decoded as an integer


class StoredField(Strict):
    """One field of a template as the decoder reads it (``ipfix.Template.fields``)."""

    name: str | None  # None: an enterprise element, skipped by its length
    kind: int
    length: Annotated[int, Field(ge=1, le=65535)]

    @model_validator(mode="after")
    def _as_the_decoder_reads(self) -> "StoredField":
        if self.name is None:
            ok = self.kind == _SKIPPED_KIND
        elif self.name in _NAMED:
            ok = self.kind == _NAMED[self.name]
        else:  # an IANA element the decoder keeps as bytes under its number
            ok = self.name.isdigit() and self.kind == -1
        if not ok:
            raise ValueError(f"{self.name!r} with kind {self.kind} is not how the decoder reads it")
        return self


class StoredTemplate(Strict):
    """One template, with when it was last sent (wall clock, s)."""

    id: Annotated[int, Field(ge=FIRST_DATA_SET, le=65535)]
    options: bool
    sent: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    fields: Annotated[list[StoredField], Field(min_length=1, max_length=65535)]


class StoredSession(Strict):
    exporter: IpAddress
    domain: Annotated[int, Field(ge=0, le=2**32 - 1)]
    templates: Annotated[list[StoredTemplate], Field(max_length=MAX_TEMPLATES)]


class TemplateFile(Strict):
    format: Literal["cosample.ipfix-templates"]
    format_version: Literal[1]
    sessions: Annotated[list[StoredSession], Field(max_length=MAX_SESSIONS)]


def path_in(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / FOLDER / FILE


def encode(templates: Templates) -> bytes:
    """The file's bytes for what ``templates`` holds now (call on the thread that decodes)."""
    sessions = [
        {
            "exporter": exporter,
            "domain": domain,
            "templates": [
                {
                    "id": template_id,
                    "options": template.options,
                    "sent": sent,
                    "fields": [
                        {"name": name, "kind": kind, "length": length}
                        for name, kind, length in template.fields
                    ],
                }
                for template_id, (template, sent) in table.items()
            ],
        }
        for (exporter, domain), table in templates.sessions()
    ]
    return orjson.dumps({"format": FORMAT, "format_version": 1, "sessions": sessions})


def save(data: bytes, state_dir: str | os.PathLike[str]) -> Path:
    """Write ``data`` (``encode``'s) atomically: folder 0700, file 0600."""
    path = path_in(state_dir)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    return write_bytes_atomic(path, data, mode=0o600)


def load(state_dir: str | os.PathLike[str], templates: Templates, now: float) -> int:
    """Put the file's templates (those not expired at ``now``) into ``templates``; the number
    restored, 0 when there is no file. ``CollectorError`` naming the file and field when it is
    refused, and then ``templates`` is unchanged."""
    path = path_in(state_dir)
    try:
        with open(path, "rb") as stream:
            data = stream.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise CollectorError(f"{path}: cannot read: {exc.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise CollectorError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
    try:
        document: Any = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise CollectorError(f"{path}: not valid JSON ({exc})") from None
    model = validate(TemplateFile, document, where=str(path), error=CollectorError)
    restored = {}
    for session in model.sessions:
        table = {}
        for stored in session.templates:
            if now - stored.sent > templates.lifetime_s or stored.sent > now + 60:
                continue  # expired, or from a clock that was ahead: not evidence of anything
            fields = tuple((f.name, f.kind, f.length) for f in stored.fields)
            minimum = sum(1 if length == VARIABLE_LENGTH else length for _, _, length in fields)
            table[stored.id] = (Template(fields, minimum, stored.options), stored.sent)
        if table:
            restored[(session.exporter, session.domain)] = table
    templates.restore(restored)
    return sum(map(len, restored.values()))
