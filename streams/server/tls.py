"""HTTPS, with HTTP/2, on a listening socket handed to a worker (`--tls-fd`), as platform/web.py hands it over.

daphne adopts a plain socket with `--fd`, and Twisted's `ssl:` endpoint binds a port of its own; neither serves
TLS on a socket that several workers share. So the worker wraps daphne's HTTP factory in Twisted's TLS
(`TLSMemoryBIOFactory`) and adopts the socket itself. `CertificateOptions` offers through ALPN what daphne's
factory speaks, `h2` first: browsers then open every stream of a page on one connection (HTTP/2), where over
HTTP/1.1 they hold at most six connections per origin. A client that offers no ALPN gets HTTP/1.1 over TLS.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from OpenSSL import SSL, crypto
from twisted.internet import ssl
from twisted.protocols.tls import TLSMemoryBIOFactory

# A certificate file may hold the server's certificate followed by its chain (a "fullchain.pem").
PEM_CERTIFICATE = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL)


class TlsError(Exception):
    """The certificate or key cannot serve: the message says which file and why."""


@dataclass(frozen=True)
class TlsListener:
    fd: int
    cert: Path
    key: Path


def _read(what: str, path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TlsError(f"cannot read the TLS {what} {path}: {exc.strerror}") from None


def certificate_options(cert: Path, key: Path) -> ssl.CertificateOptions:
    """Load a PEM certificate (chain) and its private key; fail with a clear message when they cannot serve."""
    cert_pem, key_pem = _read("certificate", cert), _read("private key", key)
    blocks = PEM_CERTIFICATE.findall(cert_pem)
    try:
        chain = [ssl.Certificate.loadPEM(block).original for block in blocks]
    except SSL.Error:
        chain = []
    if not chain:
        raise TlsError(f"the TLS certificate {cert} holds no PEM certificate") from None
    try:
        private = ssl.KeyPair.load(key_pem, crypto.FILETYPE_PEM)
    except SSL.Error:
        raise TlsError(f"the TLS private key {key} holds no PEM private key") from None
    options = ssl.CertificateOptions(privateKey=private.original, certificate=chain[0], extraCertChain=chain[1:])
    try:
        options.getContext()  # checks that the key is the certificate's
    except SSL.Error:
        raise TlsError(f"the TLS private key {key} does not belong to the certificate {cert}") from None
    return options


def listen_tls(reactor: Any, listener: TlsListener, factory: Any, options: ssl.CertificateOptions) -> Any:
    """Serve `factory` over TLS on the listening socket `listener.fd` (IPv4, as daphne adopts its `--fd`)."""
    wrapped = TLSMemoryBIOFactory(options, False, factory)  # type: ignore[arg-type]
    return reactor.adoptStreamPort(listener.fd, socket.AF_INET, wrapped)
