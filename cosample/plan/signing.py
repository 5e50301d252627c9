"""Ed25519 signatures over plan files: detached ``PLAN.sig`` files, ``sha256:`` and base64.

The signature covers the exact bytes of the plan file (or plan set) as served, so nothing has to
be canonicalised: an agent configured with ``public_key`` fetches ``PLAN`` and ``PLAN.sig`` and
refuses the plan unless the signature verifies with one of the keys in that file (read at every
verification, so a new key needs no restart).

What is signed is the bytes' SHA-256 behind a context string (``sha256:`` in front of the
base64 says so), not the bytes themselves: ed25519 hashes its message twice with SHA-512, where
one SHA-256 is cheaper and is the publication's ETag as well (what each costs on a 343 MB plan
set: docs/formats.md, "Signatures"; minisign prehashes large files the same way). A ``.sig``
without the tag, an ed25519 signature over the bytes themselves (the form before), is still
verified: agents accept both, so they may be upgraded before the controller. Verifying costs
one SHA-256 of the plan too, where the form before took one SHA-512.

Keys are PEM files (private: PKCS#8, mode 0600; public: SubjectPublicKeyInfo, several one after
another); a public key may also be given as 32 raw bytes in base64, one a line.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import stat
from pathlib import Path
from typing import Literal, overload

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes, PublicKeyTypes

from cosample.files import write_bytes_atomic
from cosample.plan.errors import PlanError, SignatureError, SigningKeyError

SIGNATURE_SUFFIX = ".sig"
#: What a ``.sig`` that signs the plan's SHA-256 starts with (base64 has no colon).
DIGEST_TAG = b"sha256:"
#: What is signed in front of the digest: no plan (JSON) begins so, so a signature in one
#: form is never valid in the other.
_DIGEST_CONTEXT = b"cosample plan sha256\x00"
_PEM_BLOCK = re.compile(rb"-----BEGIN [A-Z ]+-----.*?-----END [A-Z ]+-----\s*", re.S)


def generate_keypair(private_path: str | Path, public_path: str | Path) -> None:
    """Write a new private key (mode 0600) and its public key; refuses to overwrite."""
    private_path, public_path = Path(private_path), Path(public_path)
    for path in (private_path, public_path):
        if path.exists():
            raise SigningKeyError(f"{path}: already exists; refusing to overwrite a key")
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    write_bytes_atomic(private_path, private_pem, mode=0o600, parents=True)
    write_bytes_atomic(public_path, public_pem, mode=0o644, parents=True)


def content_digest(data: bytes) -> bytes:
    """The SHA-256 a signature of ``data`` signs."""
    return hashlib.sha256(data).digest()


def sign_bytes(data: bytes, private_key_path: str | Path) -> bytes:
    """The ``.sig`` file content for ``data``: ``sha256:``, base64 signature and a newline."""
    return sign_digest(content_digest(data), private_key_path)


def sign_digest(digest: bytes, private_key_path: str | Path) -> bytes:
    """``sign_bytes`` of the bytes whose ``content_digest`` is ``digest`` (hashed once by a
    publisher that needs the digest for more than the signature)."""
    key = load_private_key(private_key_path)
    return DIGEST_TAG + base64.b64encode(key.sign(_DIGEST_CONTEXT + digest)) + b"\n"


def load_private_key(path: str | Path) -> Ed25519PrivateKey:
    """An ed25519 private key (PKCS#8 PEM), for a signer that signs many times."""
    key = _load(Path(path), private=True)
    assert isinstance(key, Ed25519PrivateKey)
    return key


def sign_file(plan_path: str | Path, private_key_path: str | Path) -> Path:
    """Write ``PLAN.sig`` beside ``plan_path``; returns its path."""
    plan_path = Path(plan_path)
    signature_path = plan_path.with_name(plan_path.name + SIGNATURE_SUFFIX)
    try:
        data = plan_path.read_bytes()
    except OSError as exc:
        raise PlanError(
            f"{plan_path}: cannot read the plan to sign ({exc.strerror or exc})"
        ) from None
    write_bytes_atomic(signature_path, sign_bytes(data, private_key_path))
    return signature_path


def verify(
    data: bytes, signature: bytes | None, public_key_path: str | Path, what: str = "plan signature"
) -> None:
    """Nothing if ``signature`` (``.sig`` content) is valid for ``data``; else ``SignatureError``
    (its message starts with ``what``)."""
    if signature is None:
        missing = (
            "expected a detached PLAN.sig file"
            if what == "plan signature"
            else "a public key is configured: unsigned slices are refused"
        )
        raise SignatureError(f"{what}: missing ({missing})")
    text, message = signature.strip(), data
    if text.startswith(DIGEST_TAG):
        text, message = text[len(DIGEST_TAG) :], _DIGEST_CONTEXT + content_digest(data)
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise SignatureError(f"{what}: not base64") from None
    keys = public_keys(Path(public_key_path))
    for key in keys:
        try:
            key.verify(raw, message)
            return
        except InvalidSignature:
            continue
    which = "" if len(keys) == 1 else f"any of the {len(keys)} keys in "
    raise SignatureError(
        f"{what}: does not verify with {which}{public_key_path}; refusing the plan"
    )


def public_keys(path: Path) -> list[Ed25519PublicKey]:
    """Every key of a public key file: PEM blocks one after another, or raw keys in base64 one a
    line. Several keys let a rotation of the signing key overlap (docs/operations.md)."""
    data = _read(path)
    if data.lstrip().startswith(b"-----"):
        blocks = _PEM_BLOCK.findall(data)
        if not blocks:
            blocks = [data]  # no whole block: the parser says what is wrong
        elif _PEM_BLOCK.sub(b"", data).strip():
            raise SigningKeyError(
                f"{path}: not an ed25519 public key (text outside its PEM blocks)"
            )
    else:
        blocks = [line for line in data.splitlines() if line.strip()]
    if not blocks:
        raise SigningKeyError(f"{path}: no public key in the file")
    return [_parse(path, block, private=False) for block in blocks]


def key_permission_warning(path: str | Path) -> str | None:
    """A warning if a private key is readable or writable by group or others, naming the fix."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return None  # loading it reports the problem
    if not mode & 0o077:
        return None
    return (
        f"warning: private key {path} has mode {mode:04o}: group or others can read or "
        f"change it; fix with: chmod 600 {path}"
    )


def _load(path: Path, private: bool) -> Ed25519PrivateKey | Ed25519PublicKey:
    return _parse(path, _read(path), private)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise SigningKeyError(f"{path}: cannot read key ({exc.strerror})") from None


@overload
def _parse(path: Path, data: bytes, private: Literal[False]) -> Ed25519PublicKey: ...
@overload
def _parse(path: Path, data: bytes, private: bool) -> Ed25519PrivateKey | Ed25519PublicKey: ...
def _parse(path: Path, data: bytes, private: bool) -> Ed25519PrivateKey | Ed25519PublicKey:
    key: PrivateKeyTypes | PublicKeyTypes
    try:
        if private:
            key = serialization.load_pem_private_key(data, password=None)
        elif data.lstrip().startswith(b"-----"):
            key = serialization.load_pem_public_key(data)
        else:
            key = Ed25519PublicKey.from_public_bytes(base64.b64decode(data.strip(), validate=True))
    except (ValueError, TypeError, binascii.Error) as exc:
        raise SigningKeyError(
            f"{path}: not an ed25519 {'private' if private else 'public'} key ({exc})"
        ) from None
    expected = Ed25519PrivateKey if private else Ed25519PublicKey
    if not isinstance(key, expected):
        raise SigningKeyError(f"{path}: not an ed25519 key")
    return key
