"""Throwaway TLS material for a secured dev stack: a certificate authority and a server
certificate for 127.0.0.1, made with the ``openssl`` command line.

Kafka reads the server certificate as a PEM key store (``ssl.keystore.type=PEM``: the unencrypted
PKCS#8 key followed by the certificate, in one file) and the CA as a PEM trust store; Postgres
reads the certificate and the key as two files. Clients trust :attr:`TlsFiles.ca_cert`.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from berth_dev.devstack import procs
from berth_dev.devstack.procs import DevStackError

OPENSSL_HINT = "Install the openssl command line (apt-get install openssl)."
VALID_DAYS = 7


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of one certificate authority and the server certificate it signed."""

    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    server_keystore: Path
    """The server's unencrypted PKCS#8 key followed by its certificate: Kafka's PEM key store."""


def _openssl(*args: str, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise DevStackError(f"openssl not found: {OPENSSL_HINT}")
    procs.run_checked([openssl, *args], what=f"openssl {args[0]}", hint=OPENSSL_HINT, cwd=cwd)


def make_certificate_authority(directory: Path, *, name: str = "Berth dev CA") -> tuple[Path, Path]:
    """A self-signed CA (certificate, key) in ``directory``, named ``name``."""
    directory.mkdir(parents=True, exist_ok=True)
    stem = name.lower().replace(" ", "-")
    cert, key = directory / f"{stem}.crt", directory / f"{stem}.key"
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(key),
        "-out",
        str(cert),
        "-days",
        str(VALID_DAYS),
        "-subj",
        f"/CN={name}",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )
    key.chmod(0o600)
    return cert, key


def make_server_certificate(
    directory: Path, ca_cert: Path, ca_key: Path, *, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")
) -> tuple[Path, Path]:
    """A server certificate (certificate, key) for ``hosts`` (IP addresses or DNS names), signed
    by the CA of ``ca_cert``/``ca_key``."""
    cert, key, request, extensions = (directory / name for name in ("server.crt", "server.key", "server.csr", "v3.ext"))
    names = ",".join(f"IP:{host}" if host.replace(".", "").isdigit() else f"DNS:{host}" for host in hosts)
    extensions.write_text(
        f"subjectAltName={names}\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
    )
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(request), "-subj", f"/CN={hosts[0]}",
        cwd=directory,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", str(request), "-CA", str(ca_cert), "-CAkey", str(ca_key), "-CAcreateserial",
        "-out", str(cert), "-days", str(VALID_DAYS), "-extfile", str(extensions),
        cwd=directory,
    )  # fmt: skip
    key.chmod(0o600)
    request.unlink()
    return cert, key


def make_tls_files(directory: Path) -> TlsFiles:
    """A CA and a server certificate for 127.0.0.1 and localhost, in ``directory``."""
    ca_cert, ca_key = make_certificate_authority(directory)
    server_cert, server_key = make_server_certificate(directory, ca_cert, ca_key)
    keystore = directory / "server-keystore.pem"
    keystore.write_text(server_key.read_text() + server_cert.read_text())
    keystore.chmod(0o600)
    return TlsFiles(ca_cert, ca_key, server_cert, server_key, keystore)
