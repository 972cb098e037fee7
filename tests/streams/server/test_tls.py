"""HTTPS on a handed-over socket (streams/server/tls.py): what the certificate and key must be, and the sentence a
worker fails with when they cannot serve (the serving itself is tested end to end in tests/e2e/test_http2.py)."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from streams.server.tls import TlsError, certificate_options


def pair(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for `name` and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / f"{name}-cert.pem", directory / f"{name}-key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


# pyOpenSSL deprecates the X509 and PKey objects the module hands Twisted (a worker shows warnings, never raises)
pytestmark = pytest.mark.filterwarnings("ignore:Passing pyOpenSSL .* objects is deprecated:DeprecationWarning")


def test_a_certificate_and_its_key_serve_and_a_full_chain_is_read_whole(tmp_path: Path) -> None:
    cert, key = pair(tmp_path, "server")
    intermediate, _ = pair(tmp_path, "intermediate")
    certificate_options(cert, key).getContext()
    fullchain = tmp_path / "fullchain.pem"
    fullchain.write_bytes(cert.read_bytes() + intermediate.read_bytes())
    assert len(certificate_options(fullchain, key).extraCertChain) == 1


def test_what_cannot_serve_is_refused_with_the_file_and_the_reason(tmp_path: Path) -> None:
    cert, key = pair(tmp_path, "server")
    _, other_key = pair(tmp_path, "other")
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("no certificate here\n")
    with pytest.raises(TlsError, match="cannot read the TLS certificate"):
        certificate_options(tmp_path / "missing.pem", key)
    with pytest.raises(TlsError, match="holds no PEM certificate"):
        certificate_options(not_pem, key)
    with pytest.raises(TlsError, match="does not belong to the certificate"):
        certificate_options(cert, other_key)
