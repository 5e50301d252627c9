"""Ed25519 detached signatures: keygen, sign, verify, and every way verification must fail."""

from __future__ import annotations

import base64
import os

import pytest

from cosample.plan.errors import PlanError, SignatureError, SigningKeyError
from cosample.plan.signing import generate_keypair, sign_bytes, sign_file, verify


@pytest.fixture
def keys(tmp_path):
    generate_keypair(tmp_path / "plan.key", tmp_path / "plan.pub")
    return tmp_path / "plan.key", tmp_path / "plan.pub"


def test_sign_then_verify(tmp_path, keys):
    plan = tmp_path / "plan.json"
    plan.write_bytes(b'{"a": 1}\n')
    signature = sign_file(plan, keys[0])
    assert signature.name == "plan.json.sig"
    verify(plan.read_bytes(), signature.read_bytes(), keys[1])
    assert os.stat(keys[0]).st_mode & 0o777 == 0o600


def test_signing_a_missing_plan_is_one_error_naming_it(tmp_path, keys):
    with pytest.raises(PlanError, match=r"missing\.json: cannot read the plan to sign"):
        sign_file(tmp_path / "missing.json", keys[0])
    assert not (tmp_path / "missing.json.sig").exists()


def test_tampered_plan_or_wrong_key_fails(tmp_path, keys):
    signature = sign_bytes(b"plan", keys[0])
    with pytest.raises(SignatureError, match="does not verify"):
        verify(b"plan!", signature, keys[1])
    generate_keypair(tmp_path / "other.key", tmp_path / "other.pub")
    with pytest.raises(SignatureError, match="does not verify"):
        verify(b"plan", signature, tmp_path / "other.pub")


def test_missing_or_garbled_signature_fails(keys):
    with pytest.raises(SignatureError, match="missing"):
        verify(b"plan", None, keys[1])
    with pytest.raises(SignatureError, match="base64"):
        verify(b"plan", b"%%%", keys[1])


def test_raw_base64_public_key_accepted(tmp_path, keys):
    from cryptography.hazmat.primitives import serialization

    public = serialization.load_pem_public_key(keys[1].read_bytes())
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    (tmp_path / "raw.pub").write_bytes(base64.b64encode(raw))
    verify(b"plan", sign_bytes(b"plan", keys[0]), tmp_path / "raw.pub")


def test_keygen_refuses_to_overwrite_and_bad_keys_are_named(tmp_path, keys):
    with pytest.raises(SigningKeyError, match="refusing to overwrite"):
        generate_keypair(keys[0], tmp_path / "new.pub")
    (tmp_path / "junk.pub").write_text("-----BEGIN PUBLIC KEY-----\njunk\n")
    with pytest.raises(SigningKeyError, match="junk.pub"):
        verify(b"x", sign_bytes(b"x", keys[0]), tmp_path / "junk.pub")


def test_a_key_file_with_several_keys_accepts_a_signature_by_any(tmp_path, keys):
    """Rotation overlaps: the agents' file holds the old and the new key while the controller
    switches (docs/operations.md, "Rotating the plan-signing key")."""
    generate_keypair(tmp_path / "new.key", tmp_path / "new.pub")
    both = tmp_path / "both.pub"
    both.write_bytes(keys[1].read_bytes() + (tmp_path / "new.pub").read_bytes())
    verify(b"plan", sign_bytes(b"plan", keys[0]), both)
    verify(b"plan", sign_bytes(b"plan", tmp_path / "new.key"), both)
    generate_keypair(tmp_path / "third.key", tmp_path / "third.pub")
    with pytest.raises(SignatureError, match="any of the 2 keys in"):
        verify(b"plan", sign_bytes(b"plan", tmp_path / "third.key"), both)


def test_raw_keys_one_a_line_and_bad_key_files_are_named(tmp_path, keys):
    from cryptography.hazmat.primitives import serialization

    lines = []
    for name in ("plan", "new"):
        if name == "new":
            generate_keypair(tmp_path / "new.key", tmp_path / "new.pub")
        public = serialization.load_pem_public_key((tmp_path / f"{name}.pub").read_bytes())
        lines.append(
            base64.b64encode(
                public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
            )
        )
    (tmp_path / "raw.pub").write_bytes(b"\n".join(lines) + b"\n")
    verify(b"plan", sign_bytes(b"plan", tmp_path / "new.key"), tmp_path / "raw.pub")
    (tmp_path / "empty.pub").write_bytes(b"\n")
    with pytest.raises(SigningKeyError, match="empty.pub: no public key"):
        verify(b"x", sign_bytes(b"x", keys[0]), tmp_path / "empty.pub")
    (tmp_path / "tail.pub").write_bytes(keys[1].read_bytes() + b"trailing junk\n")
    with pytest.raises(SigningKeyError, match="tail.pub: not an ed25519 public key"):
        verify(b"x", sign_bytes(b"x", keys[0]), tmp_path / "tail.pub")


def test_the_signature_signs_the_digest_and_says_so(keys):
    """``sha256:`` and base64 of ed25519 over the context and the bytes' SHA-256: a publisher
    hashes a 343 MB plan set once (docs/formats.md, "Signatures")."""
    from cryptography.hazmat.primitives import serialization

    from cosample.plan.signing import DIGEST_TAG, content_digest

    signature = sign_bytes(b"plan", keys[0])
    assert signature.startswith(DIGEST_TAG) and signature.endswith(b"\n")
    raw = base64.b64decode(signature[len(DIGEST_TAG) :].strip(), validate=True)
    public = serialization.load_pem_public_key(keys[1].read_bytes())
    public.verify(raw, b"cosample plan sha256\x00" + content_digest(b"plan"))  # raises if not


def test_a_signature_over_the_bytes_themselves_still_verifies(keys):
    """The form before (no tag): agents upgraded before their controller keep accepting it."""
    from cosample.plan.signing import load_private_key

    legacy = base64.b64encode(load_private_key(keys[0]).sign(b"plan")) + b"\n"
    verify(b"plan", legacy, keys[1])
    with pytest.raises(SignatureError, match="does not verify"):
        verify(b"plan!", legacy, keys[1])


def test_the_two_forms_are_not_interchangeable(keys):
    """A tag moved onto or off a signature makes it fail: each form verifies only as itself."""
    from cosample.plan.signing import DIGEST_TAG, load_private_key

    digest_form = sign_bytes(b"plan", keys[0])
    with pytest.raises(SignatureError, match="does not verify"):
        verify(b"plan", digest_form[len(DIGEST_TAG) :], keys[1])
    legacy = base64.b64encode(load_private_key(keys[0]).sign(b"plan")) + b"\n"
    with pytest.raises(SignatureError, match="does not verify"):
        verify(b"plan", DIGEST_TAG + legacy, keys[1])
    with pytest.raises(SignatureError, match="does not verify"):
        verify(b"plan!", digest_form, keys[1])
    with pytest.raises(SignatureError, match="base64"):
        verify(b"plan", DIGEST_TAG + b"%%%", keys[1])
