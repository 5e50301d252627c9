"""Signed snapshots: the collector and the application monitor sign each snapshot they serve,
the controller verifies it.

The controller plans from what a snapshot URL returns, so whoever can answer for that URL (a
host on the path, a process that took the collector's port) could steer every plan. Snapshots
are therefore signed like plans: ed25519 over the exact bytes served (``cosample.plan.signing``;
no canonical form, no certificates), the signature travelling in the same HTTP response as the
body (header ``X-Cosample-Signature``, base64), so a reader never pairs one snapshot with
another's signature. A snapshot read from a file is verified against ``FILE.sig``. The
signature covers the snapshot's ``time``, so a replayed snapshot is only good while it is
younger than the controller's ``--max-age``. Each collector has its own key pair; the
controller accepts a snapshot signed by any of the public keys it is given.
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from cosample.errors import CosampleError
from cosample.plan.errors import SigningKeyError
from cosample.plan.signing import load_private_key, public_keys

HEADER = "X-Cosample-Signature"
SIGNATURE_SUFFIX = ".sig"


class AuthenticityError(CosampleError):
    """An unusable snapshot key, or a snapshot unsigned or not signed by a known key."""


class Signer:
    """A private key loaded once (the collector signs every export, several times a second)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        key = _keys(self.path, private=True)[0]
        assert isinstance(key, Ed25519PrivateKey)  # private=True loads the private key
        self._key = key

    def sign(self, data: bytes) -> str:
        """The header value for ``data``: base64 of the ed25519 signature."""
        return base64.b64encode(self._key.sign(data)).decode("ascii")


class Verifier:
    """The collectors' public keys; ``verify`` accepts a snapshot signed by any of them."""

    def __init__(self, paths: tuple[str | Path, ...]) -> None:
        self.paths = tuple(Path(p) for p in paths)
        self._keys = [key for path in self.paths for key in _keys(path, private=False)]

    def verify(self, data: bytes, signature: str | bytes | None, where: str) -> None:
        if signature is None:
            raise AuthenticityError(
                f"{where}: unsigned snapshot (no {HEADER} header or "
                f"{SIGNATURE_SUFFIX} file); refused"
            )
        try:
            raw = base64.b64decode(signature.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise AuthenticityError(f"{where}: snapshot signature is not base64; refused") from None
        for key in self._keys:
            try:
                key.verify(raw, data)  # type: ignore[union-attr]
                return
            except InvalidSignature:
                continue
        names = ", ".join(str(p) for p in self.paths)
        raise AuthenticityError(
            f"{where}: snapshot signature does not verify with {names}; refused"
        )


def _keys(path: Path, private: bool) -> list[Ed25519PrivateKey] | list[Ed25519PublicKey]:
    """The key (or a public key file's keys), by the plans' own loader, errors as ours."""
    try:
        return [load_private_key(path)] if private else public_keys(path)
    except SigningKeyError as exc:
        raise AuthenticityError(
            f"snapshot {'private' if private else 'public'} key: {exc}"
        ) from None
