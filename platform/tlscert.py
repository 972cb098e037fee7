"""The certificate platform/web.py serves HTTPS with: the user's (``WEB_TLS_CERT``, ``WEB_TLS_KEY``), checked before
any worker starts, or a development certificate it makes under ``var/tls/``.

The development certificate is self-signed (a browser warns about it; tests accept it) for ``localhost``,
``127.0.0.1``, ``::1`` and ``WEB_HOST``. It is made again when it is missing, expires within a day, or does not
name ``WEB_HOST``.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import ipaddress
import os
import tempfile
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

DEV_NAMES = ("localhost", "127.0.0.1", "::1")
DEV_VALIDITY = datetime.timedelta(days=90)
DEV_CERT, DEV_KEY = "dev-cert.pem", "dev-key.pem"


class CertificateError(Exception):
    """The given certificate or key cannot serve; the message names the setting, the file and why."""


def _read(setting: str, path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CertificateError(f"{setting}={path}: cannot read it: {exc.strerror}") from None


def _spki(key: object) -> bytes:
    return key.public_bytes(  # type: ignore[attr-defined,no-any-return]
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def check_pair(cert: Path, key: Path) -> None:
    """Fail with a clear message unless `cert` holds a PEM certificate and `key` its unencrypted PEM key."""
    cert_pem, key_pem = _read("WEB_TLS_CERT", cert), _read("WEB_TLS_KEY", key)
    try:
        certificate = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        raise CertificateError(f"WEB_TLS_CERT={cert}: holds no PEM certificate") from None
    try:
        private = serialization.load_pem_private_key(key_pem, None)
    except (ValueError, TypeError):
        raise CertificateError(f"WEB_TLS_KEY={key}: holds no unencrypted PEM private key") from None
    if _spki(private.public_key()) != _spki(certificate.public_key()):
        raise CertificateError(f"WEB_TLS_KEY={key} is not the private key of WEB_TLS_CERT={cert}")


def _names(host: str) -> list[str]:
    return list(dict.fromkeys([*DEV_NAMES, host]))


def _usable(cert: Path, key: Path, host: str) -> bool:
    """The development certificate there is valid for a day more and names `host`."""
    try:
        check_pair(cert, key)
        certificate = x509.load_pem_x509_certificate(cert.read_bytes())
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (CertificateError, OSError, x509.ExtensionNotFound):
        return False
    listed = {str(name) for name in names.get_values_for_type(x509.DNSName)}
    listed |= {str(address) for address in names.get_values_for_type(x509.IPAddress)}
    fresh = certificate.not_valid_after_utc - datetime.timedelta(days=1) > datetime.datetime.now(datetime.UTC)
    return fresh and all(_canonical(name) in listed for name in _names(host))


def _canonical(name: str) -> str:
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(name))
    return name


def _write(path: Path, data: bytes) -> None:
    """Whole or not at all (two supervisors may start at once), readable by its owner only."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    with os.fdopen(handle, "wb") as out:
        out.write(data)
    os.replace(temporary, path)


def development_pair(directory: Path, host: str) -> tuple[Path, Path]:
    """The development certificate and key under `directory`, made (again) when not usable for `host`."""
    cert, key = directory / DEV_CERT, directory / DEV_KEY
    if _usable(cert, key, host):
        return cert, key
    directory.mkdir(parents=True, exist_ok=True)
    # Two supervisors starting at once (two test runs side by side) make one pair: each file is replaced whole,
    # but without the lock one could write its key over the other's and leave the other's certificate beside it.
    with (directory / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _usable(cert, key, host):
            _make_pair(cert, key, host)
    return cert, key


def _make_pair(cert: Path, key: Path, host: str) -> None:
    private = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sse-platform development")])
    alternative: list[x509.GeneralName] = []
    for name in _names(host):
        try:
            alternative.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alternative.append(x509.DNSName(name))
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(private.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + DEV_VALIDITY)
        .add_extension(x509.SubjectAlternativeName(alternative), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(private, hashes.SHA256())
    )
    key_pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    _write(key, key_pem)
    _write(cert, certificate.public_bytes(serialization.Encoding.PEM))
