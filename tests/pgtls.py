"""A private CA and server certificates made with openssl at test time, for a TLS cluster.

The server's certificate names 127.0.0.1 and localhost only; the cluster also listens on
127.0.0.2, so reaching it there is a name mismatch with a certificate that is otherwise good. A
second CA that signed nothing the server holds is the wrong CA.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from pgcluster import SUPERUSER, PgCluster, create_cluster, sh

NAMES = "subjectAltName=IP:127.0.0.1,DNS:localhost"
MISMATCH_HOST = "127.0.0.2"
DAYS = "2"
EC = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


def make_ca(directory: Path, name: str) -> Path:
    """A self-signed CA in `directory`; returns its certificate (its key is beside it)."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    sh(
        "openssl", "req", "-x509", *EC, "-days", DAYS, "-subj", f"/CN={name}",
        "-keyout", str(key), "-out", str(cert),
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    return cert


def issue(ca: Path, directory: Path, name: str, names: str = NAMES) -> tuple[Path, Path]:
    """A server certificate and key signed by the CA at `ca`, for `names`."""
    cert, key, request = (directory / f"{name}.{ext}" for ext in ("crt", "key", "csr"))
    extensions = directory / f"{name}.ext"
    extensions.write_text(
        f"{names}\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\nauthorityKeyIdentifier=keyid\nsubjectKeyIdentifier=hash\n"
    )
    sh("openssl", "req", *EC, "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(request))
    sh(
        "openssl", "x509", "-req", "-in", str(request), "-days", DAYS,
        "-CA", str(ca), "-CAkey", str(ca.with_suffix(".key")), "-CAcreateserial",
        "-extfile", str(extensions), "-out", str(cert),
    )  # fmt: skip
    return cert, key


@dataclass(frozen=True)
class TlsCluster:
    """A cluster with ssl=on, the CA that signed its certificate, and a CA that did not."""

    cluster: PgCluster
    ca: Path
    wrong_ca: Path

    def url(
        self, database: str = "postgres", *, host: str = "127.0.0.1", ca: Path | None = None
    ) -> str:
        """A verify-full URL through `host`, trusting `ca` (the right one unless given)."""
        root = str(ca or self.ca)
        return self.cluster.url(database, host=host, sslmode="verify-full", sslrootcert=root)


def create_tls_cluster(directory: Path) -> TlsCluster:
    """A started cluster on 127.0.0.1 and 127.0.0.2 with a certificate for 127.0.0.1 only."""
    ca = make_ca(directory, "relay-test-ca")
    wrong_ca = make_ca(directory, "relay-wrong-ca")
    cert, key = issue(ca, directory, "server")
    cluster = create_cluster(("127.0.0.1", MISMATCH_HOST))
    try:
        # The server reads its key as the cluster's owner, and only from a file no one else can.
        for source in (cert, key):
            target = cluster.conf / source.name
            shutil.copyfile(source, target)
            shutil.chown(target, SUPERUSER, SUPERUSER)
            target.chmod(0o600)
        cluster.configure(
            {
                "ssl": "on",
                "ssl_cert_file": str(cluster.conf / cert.name),
                "ssl_key_file": str(cluster.conf / key.name),
            }
        )
        cluster.sql("SELECT pg_reload_conf()")
    except BaseException:
        cluster.drop()
        raise
    return TlsCluster(cluster, ca, wrong_ca)
