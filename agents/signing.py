"""Ed25519 signatures over plan files: detached ``PLAN.sig`` files holding base64 of the signature.

The signature covers the exact bytes of the plan file (or plan set) as served, so nothing has to
be canonicalised: an agent configured with ``public_key`` fetches ``PLAN`` and ``PLAN.sig`` and
refuses the plan unless the signature verifies. Keys are PEM files (private: PKCS#8, mode 0600;
public: SubjectPublicKeyInfo); a public key may also be given as 32 raw bytes in base64.
"""

from __future__ import annotations

import base64
import binascii
import os
import stat
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (Ed25519PrivateKey,
                                                               Ed25519PublicKey)

from cosample.agents.errors import AgentError, SignatureError
from cosample.files import write_bytes_atomic

SIGNATURE_SUFFIX = ".sig"


def generate_keypair(private_path: str | Path, public_path: str | Path) -> None:
    """Write a new private key (mode 0600) and its public key; refuses to overwrite."""
    private_path, public_path = Path(private_path), Path(public_path)
    for path in (private_path, public_path):
        if path.exists():
            raise AgentError(f"{path}: already exists; refusing to overwrite a key")
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    public_pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo)
    write_bytes_atomic(private_path, private_pem, mode=0o600, parents=True)
    write_bytes_atomic(public_path, public_pem, mode=0o644, parents=True)


def sign_bytes(data: bytes, private_key_path: str | Path) -> bytes:
    """The ``.sig`` file content for ``data``: base64 signature and a newline."""
    key = _load(Path(private_key_path), private=True)
    return base64.b64encode(key.sign(data)) + b"\n"


def sign_file(plan_path: str | Path, private_key_path: str | Path) -> Path:
    """Write ``PLAN.sig`` beside ``plan_path``; returns its path."""
    plan_path = Path(plan_path)
    signature_path = plan_path.with_name(plan_path.name + SIGNATURE_SUFFIX)
    write_bytes_atomic(signature_path, sign_bytes(plan_path.read_bytes(), private_key_path))
    return signature_path


def verify(data: bytes, signature: bytes | None, public_key_path: str | Path) -> None:
    """Nothing if ``signature`` (``.sig`` content) is valid for ``data``; else ``SignatureError``."""
    if signature is None:
        raise SignatureError("plan signature: missing (expected a detached PLAN.sig file)")
    try:
        raw = base64.b64decode(signature.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise SignatureError("plan signature: not base64") from None
    key = _load(Path(public_key_path), private=False)
    try:
        key.verify(raw, data)
    except InvalidSignature:
        raise SignatureError(f"plan signature: does not verify with {public_key_path}; "
                             f"refusing the plan") from None


def key_permission_warning(path: str | Path) -> str | None:
    """A warning if a private key is readable or writable by group or others, naming the fix."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return None  # loading it reports the problem
    if not mode & 0o077:
        return None
    return (f"warning: private key {path} has mode {mode:04o}: group or others can read or "
            f"change it; fix with: chmod 600 {path}")


def _load(path: Path, private: bool) -> Ed25519PrivateKey | Ed25519PublicKey:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise AgentError(f"{path}: cannot read key ({exc.strerror})") from None
    try:
        if private:
            key = serialization.load_pem_private_key(data, password=None)
        elif data.lstrip().startswith(b"-----"):
            key = serialization.load_pem_public_key(data)
        else:
            key = Ed25519PublicKey.from_public_bytes(base64.b64decode(data.strip(), validate=True))
    except (ValueError, TypeError, binascii.Error) as exc:
        raise AgentError(f"{path}: not an ed25519 {'private' if private else 'public'} key "
                         f"({exc})") from None
    expected = Ed25519PrivateKey if private else Ed25519PublicKey
    if not isinstance(key, expected):
        raise AgentError(f"{path}: not an ed25519 key")
    return key


