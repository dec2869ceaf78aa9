"""The undercloud as its own certificate authority, and checks of an operator's certificates.

- `ensure_ca`: a CA (EC P-256, ten years) in a tls directory (`$UNDERCLOUD_HOME/tls/`), made
  once and then kept as it is: a CA half there, or whose files do not match, is an error
  naming the file, never overwritten (it may be an operator's).
- `issue` / `ensure_cert` (`ensure_server_cert`: the service's own): a server certificate
  signed by that CA, for the names (host names or IP addresses) its clients use; made again
  when a name is new, when it nears its end (`RENEW_WITHIN`) or when the CA changed, else
  left untouched. The overcloud's public endpoints get theirs so (overcloud/public_tls.py).
- `check_pair`: an operator's own certificate and key (TripleO's SSLCertificate, SSLKey and
  PublicTLSCAFile), checked before they are used: each fault is one line, without key
  material.
- `expiry`: when a certificate ends (clients' context:
  `config.client_context`).

Keys are written with mode 0600 from their creation and every file whole or not at all
(`agent.files.write_atomic`); the work on one tls directory holds a lock on it, so that two
processes starting at once make one CA, not two halves of two.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import hashlib
import ipaddress
import os
import secrets
from collections.abc import Iterator, Sequence
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from undercloud.agent.files import write_atomic
from undercloud.errors import InvalidInput

CA_CERT = "ca.pem"
CA_KEY = "ca.key"
SERVICE_CERT = "service.pem"
SERVICE_KEY = "service.key"

RENEW_WITHIN = datetime.timedelta(days=30)
CA_DAYS = 3650
P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551  # of secp256r1's group
SEEDED_START = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)  # a seeded CA's start: the same everywhere
SKEW = datetime.timedelta(minutes=5)  # not_valid_before backdated: a client's clock a little behind
MAX_CHAIN = 8  # intermediates followed from a certificate to its CA (check_pair)

UTC = datetime.UTC  # the same object as datetime.timezone.utc (ruff UP017 asks for this spelling)
IP = ipaddress.IPv4Address | ipaddress.IPv6Address


# ---- the CA and the service's certificate ----------------------------------------------
def ensure_ca(tls_dir: Path, seed: bytes | None = None) -> tuple[Path, Path]:
    """Make the CA in `tls_dir` unless it is there; returns (certificate, key) paths. With
    `seed` (a secret), its key and name derive from it: every holder of the seed makes the
    same CA (the workers of one store, from its key), so each trusts the others' certificates."""
    tls_dir = Path(tls_dir)
    with _locked(tls_dir):
        return _ensure_ca(tls_dir, seed)


def issue(ca_cert_pem: bytes, ca_key_pem: bytes, names: list[str], *, days: int = 365) -> tuple[bytes, bytes]:
    """A server certificate and its new key (PEM) for `names`, signed by the CA; the first
    name is its subject's CN, each one a SAN (an IP address when it parses as one)."""
    return _issue(ca_cert_pem, ca_key_pem, names, days=days, now=_utc(None))


def ensure_server_cert(tls_dir: Path, names: list[str], *, now: datetime.datetime | None = None,
                       seed: bytes | None = None) -> tuple[Path, Path]:
    """The CA, then the service's certificate for `names` (see `ensure_cert`)."""
    tls_dir = Path(tls_dir)
    return ensure_cert(tls_dir, tls_dir / SERVICE_CERT, tls_dir / SERVICE_KEY, names, now=now, seed=seed)


def ensure_cert(tls_dir: Path, cert_path: Path, key_path: Path, names: list[str], *,
                now: datetime.datetime | None = None, seed: bytes | None = None) -> tuple[Path, Path]:
    """The CA of `tls_dir`, then a server certificate for `names` at `cert_path` and its key
    at `key_path` (0600): issued again only when it is missing, lacks one of `names`, ends
    within RENEW_WITHIN of `now` or is not signed by the current CA (else its files are not
    touched). Returns (certificate, key) paths."""
    tls_dir, cert_path, key_path = Path(tls_dir), Path(cert_path), Path(key_path)
    now = _utc(now)
    wanted = _names(names)
    with _locked(tls_dir):
        ca_path, ca_key_path = _ensure_ca(tls_dir, seed)
        ca_pem, ca_key_pem = ca_path.read_bytes(), ca_key_path.read_bytes()
        if _service_cert_stale(cert_path, key_path, wanted, ca_pem, now):
            cert_pem, key_pem = _issue(ca_pem, ca_key_pem, wanted, days=365, now=now)
            write_atomic(key_path, key_pem, 0o600)  # key first: a crash between leaves a mismatch, seen as stale
            write_atomic(cert_path, cert_pem, 0o644)
        return cert_path, key_path


# ---- an operator's certificate ---------------------------------------------------------
def check_pair(cert_pem: bytes, key_pem: bytes, *, names: Sequence[str] = (), ca_pem: bytes | None = None,
               now: datetime.datetime | None = None, where: str | None = None) -> None:
    """Raise InvalidInput (one line, no key material) unless `cert_pem` (a certificate, maybe
    followed by its intermediates) and `key_pem` belong together, are valid at `now`, cover
    every one of `names` and, given `ca_pem` (one CA or a bundle), chain up to it."""
    now = _utc(now)
    try:
        chain = x509.load_pem_x509_certificates(cert_pem)
    except ValueError:
        raise InvalidInput("the certificate is not a PEM certificate", where=where) from None
    cert = chain[0]
    key = _load_key(key_pem)
    if key is None:
        raise InvalidInput("the key is not a PEM private key (or it is encrypted)", where=where)
    if not _same_public_key(cert, key):
        raise InvalidInput("the key does not match the certificate", where=where)
    if cert.not_valid_after_utc < now:
        raise InvalidInput(f"the certificate expired on {_day(cert.not_valid_after_utc)}", where=where)
    if cert.not_valid_before_utc > now:
        raise InvalidInput(f"the certificate is not valid before {_day(cert.not_valid_before_utc)}", where=where)
    try:
        missing = [n for n in names if not _covers(cert, n)]
    except ValueError:
        raise InvalidInput("the certificate's subject alternative names cannot be read", where=where) from None
    if missing:
        raise InvalidInput(f"the certificate does not cover {', '.join(missing)}", where=where)
    if ca_pem is not None:
        try:
            cas = x509.load_pem_x509_certificates(ca_pem)
        except ValueError:
            raise InvalidInput("the CA is not a PEM certificate", where=where) from None
        if not _chains_to(cert, chain[1:], cas):
            raise InvalidInput("the certificate is not signed by the given CA", where=where)


def expiry(cert_pem: bytes) -> datetime.datetime:
    """When the certificate ends (UTC): what renewal and a warning compare with."""
    return _load_cert(cert_pem).not_valid_after_utc


# ---- helpers -----------------------------------------------------------------------------
@contextlib.contextmanager
def _locked(tls_dir: Path) -> Iterator[None]:
    """Make `tls_dir` (0700 when made here) and hold an exclusive lock on it. Not reentrant:
    a second lock in the same process would wait for the first."""
    if not tls_dir.is_dir():
        tls_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(tls_dir, 0o700)  # the umask may have narrowed it, never widened: exact now
    fd = os.open(tls_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _ensure_ca(tls_dir: Path, seed: bytes | None = None) -> tuple[Path, Path]:
    cert_path, key_path = tls_dir / CA_CERT, tls_dir / CA_KEY
    has_cert, has_key = cert_path.exists(), key_path.exists()
    if has_cert and has_key:
        cert = _load_cert(cert_path.read_bytes(), where=str(cert_path))
        key = _load_key(key_path.read_bytes())
        if key is None:
            raise InvalidInput("not a PEM private key (or it is encrypted)", where=str(key_path))
        if not _same_public_key(cert, key):
            raise InvalidInput(f"the CA key does not match {CA_CERT}: restore the pair, or remove both "
                               "to make a new CA", where=str(key_path))
        return cert_path, key_path
    if has_cert != has_key:
        there, other = (cert_path, CA_KEY) if has_cert else (key_path, CA_CERT)
        raise InvalidInput(f"the CA's {other} is missing beside it: restore it, or remove this file "
                           "to make a new CA", where=str(there))
    if seed is None:
        key = ec.generate_private_key(ec.SECP256R1())
        label, serial, start = secrets.token_hex(4), x509.random_serial_number(), _utc(None) - SKEW
    else:  # the same key, name and dates from the same seed
        digest = hashlib.sha512(b"undercloud ca key\0" + seed).digest()
        key = ec.derive_private_key(int.from_bytes(digest, "big") % (P256_ORDER - 1) + 1, ec.SECP256R1())
        label = hashlib.sha256(b"undercloud ca name\0" + seed).hexdigest()[:8]
        serial, start = int(label, 16) | 1 << 64, SEEDED_START
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"Undercloud CA {label}")])
    cert = (x509.CertificateBuilder()
            .subject_name(name).issuer_name(name)
            .public_key(key.public_key())
            .serial_number(serial)
            .not_valid_before(start)
            .not_valid_after(start + datetime.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False, key_agreement=False,
                                         key_cert_sign=True, crl_sign=True, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    # The key first: a crash between the two leaves a key alone, which the next call names
    # as a half CA rather than replace (it cannot tell a crash's from an operator's).
    write_atomic(key_path, _key_pem(key), 0o600)
    write_atomic(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return cert_path, key_path


def _issue(ca_cert_pem: bytes, ca_key_pem: bytes, names: Sequence[str], *, days: int,
           now: datetime.datetime) -> tuple[bytes, bytes]:
    wanted = _names(names)
    if days < 1:
        raise InvalidInput(f"a certificate must be valid for a day at least, not {days}")
    ca = _load_cert(ca_cert_pem, where="the CA")
    ca_key = _load_key(ca_key_pem)
    if ca_key is None:
        raise InvalidInput("the CA key is not a PEM private key (or it is encrypted)")
    if not _same_public_key(ca, ca_key):
        raise InvalidInput("the CA key does not match the CA certificate")
    sans: list[x509.GeneralName] = []
    for n in wanted:
        ip = _ip(n)
        try:
            sans.append(x509.IPAddress(ip) if ip is not None else x509.DNSName(n))
        except ValueError:  # e.g. not ASCII: an IDN must come as its A-label (xn--...)
            raise InvalidInput(f"not a host name or an IP address: {n!r}") from None
    # A CN is at most 64 characters; without one the subject is empty and the SANs critical (RFC 5280)
    cn = wanted[0] if len(wanted[0]) <= 64 else None
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)] if cn else [])
    try:
        aki = x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(
            ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value)
    except x509.ExtensionNotFound:
        aki = x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.public_key())  # type: ignore[arg-type]
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(subject).issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - SKEW)
            # never past the CA's own end: a client would refuse the chain from then on anyway
            .not_valid_after(min(now + datetime.timedelta(days=days), ca.not_valid_after_utc))
            .add_extension(x509.SubjectAlternativeName(sans), critical=cn is None)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False, key_agreement=False,
                                         key_cert_sign=False, crl_sign=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(aki, critical=False)
            .sign(ca_key, _hash_for(ca_key)))  # type: ignore[arg-type]
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def _service_cert_stale(cert_path: Path, key_path: Path, names: Sequence[str], ca_pem: bytes,
                        now: datetime.datetime) -> bool:
    """Whether the service's certificate must be issued again (anything unreadable: yes)."""
    if not (cert_path.exists() and key_path.exists()):
        return True
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        ca = x509.load_pem_x509_certificate(ca_pem)
        key = _load_key(key_path.read_bytes())
        if key is None or not _same_public_key(cert, key):
            return True
        if cert.not_valid_before_utc > now or cert.not_valid_after_utc - RENEW_WITHIN <= now:
            return True
        if not all(_covers(cert, n, cn_fallback=False) for n in names):
            return True
        return not _signed_by(cert, ca)
    except ValueError:
        return True


def _names(names: Sequence[str]) -> list[str]:
    """`names` without repeats (first one first); none, or an empty one, is an error."""
    if isinstance(names, str):
        names = [names]  # a lone name, not its characters
    out: list[str] = []
    for n in names:
        n = n.strip() if isinstance(n, str) else ""
        if not n:
            raise InvalidInput(f"a certificate needs host names or IP addresses, not {names!r}")
        if n not in out:
            out.append(n)
    if not out:
        raise InvalidInput("a certificate needs at least one host name or IP address")
    return out


def _covers(cert: x509.Certificate, name: str, *, cn_fallback: bool = True) -> bool:
    """Whether `cert` is valid for `name`: an IP address among its IPAddress SANs, a host name
    among its DNSName SANs (`*.example.com` matching one label), or, only when it has no SAN
    extension, its CN (host names only: TLS clients never match an address against a CN)."""
    ip = _ip(name)
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        if not cn_fallback or ip is not None:
            return False
        cns = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
        return any(isinstance(c, str) and _dns_match(c, name) for c in cns)
    if ip is not None:
        return ip in sans.get_values_for_type(x509.IPAddress)
    return any(_dns_match(pattern, name) for pattern in sans.get_values_for_type(x509.DNSName))


def _dns_match(pattern: str, name: str) -> bool:
    pattern, name = pattern.lower().rstrip("."), name.lower().rstrip(".")
    if pattern == name:
        return True
    head, _, rest = pattern.partition(".")
    if head != "*" or not rest or "*" in rest:
        return False
    label, _, tail = name.partition(".")
    return bool(label) and tail == rest


def _chains_to(cert: x509.Certificate, intermediates: Sequence[x509.Certificate],
               cas: Sequence[x509.Certificate]) -> bool:
    """Whether `cert` is signed by one of `cas`, directly or through `intermediates`."""
    current = cert
    for _ in range(MAX_CHAIN + 1):
        if any(_signed_by(current, ca) for ca in cas):
            return True
        parent = next((i for i in intermediates if i is not current and _signed_by(current, i)), None)
        if parent is None:
            return False
        current = parent
    return False


def _signed_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature, UnsupportedAlgorithm):
        return False
    return True


def _load_cert(pem: bytes, where: str | None = None) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError:
        raise InvalidInput("not a PEM certificate", where=where) from None


def _load_key(pem: bytes):  # -> a private key, or None when it cannot be read
    """The private key in `pem`, or None: the exception's text is not kept (never shown)."""
    try:
        return serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        return None


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _same_public_key(cert: x509.Certificate, key) -> bool:
    def spki(public) -> bytes:
        return public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)

    try:
        return spki(cert.public_key()) == spki(key.public_key())
    except (ValueError, UnsupportedAlgorithm):
        return False


def _hash_for(key) -> hashes.HashAlgorithm | None:
    """Ed25519 and Ed448 keys sign without a separate hash; the others with SHA-256."""
    return None if isinstance(key, ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey) else hashes.SHA256()


def _ip(name: str) -> IP | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def _utc(now: datetime.datetime | None) -> datetime.datetime:
    """`now` (a naive one taken as UTC), or the current time."""
    if now is None:
        return datetime.datetime.now(UTC)
    return now.replace(tzinfo=UTC) if now.tzinfo is None else now


def _day(when: datetime.datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
