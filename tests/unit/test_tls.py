"""The undercloud's own CA (undercloud/tls.py): the CA made once with private modes and then
kept, a half CA named rather than replaced, server certificates a real TLS client accepts
(and refuses for another CA or another name), the service's certificate issued again only
when it must be, and an operator's certificate and key checked with one-line errors that
never carry key material."""

from __future__ import annotations

import datetime
import os
import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from undercloud import tls
from undercloud.config import client_context
from undercloud.errors import InvalidInput

UTC = datetime.UTC
DAY = datetime.timedelta(days=1)
OLD = 1_000_000_000  # an mtime long past: a rewrite would change it, whatever the clock's grain


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _stamp(*paths: Path) -> list[tuple[bytes, int, int]]:
    """Content, inode and mtime of each: what "left untouched" means."""
    for p in paths:
        os.utime(p, (OLD, OLD))
    return [(p.read_bytes(), p.stat().st_ino, p.stat().st_mtime_ns) for p in paths]


def _read(paths: tuple[Path, Path]) -> tuple[bytes, bytes]:
    return paths[0].read_bytes(), paths[1].read_bytes()


def _cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


@pytest.fixture(scope="module")
def ca(tmp_path_factory) -> tuple[bytes, bytes]:
    return _read(tls.ensure_ca(tmp_path_factory.mktemp("ca") / "tls"))


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory) -> tuple[bytes, bytes]:
    return _read(tls.ensure_ca(tmp_path_factory.mktemp("other") / "tls"))


# ---- ensure_ca ----------------------------------------------------------------------------
def test_the_ca_is_made_with_private_modes_and_is_a_ca(tmp_path):
    old = os.umask(0)  # even a careless umask does not widen them
    try:
        cert_path, key_path = tls.ensure_ca(tmp_path / "home" / "tls")
    finally:
        os.umask(old)
    assert (cert_path.name, key_path.name) == (tls.CA_CERT, tls.CA_KEY)
    assert _mode(cert_path.parent) == 0o700 and _mode(key_path) == 0o600 and _mode(cert_path) == 0o644
    assert not [p.name for p in cert_path.parent.iterdir() if p.name not in (tls.CA_CERT, tls.CA_KEY)]
    cert = _cert(cert_path.read_bytes())
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).critical
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.key_cert_sign and usage.crl_sign
    assert cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
    assert cert.subject.rfc4514_string().startswith("CN=Undercloud CA ") and cert.issuer == cert.subject
    assert cert.not_valid_after_utc - cert.not_valid_before_utc > datetime.timedelta(days=3649)
    tls.check_pair(*_read((cert_path, key_path)))  # the key is the certificate's
    old = os.umask(0o277)  # one that would leave the directory unusable to its owner: exact modes still
    try:
        cert_path, key_path = tls.ensure_ca(tmp_path / "narrow")
    finally:
        os.umask(old)
    assert _mode(cert_path.parent) == 0o700 and _mode(key_path) == 0o600 and _mode(cert_path) == 0o644


def test_an_existing_ca_is_kept_as_it_is(tmp_path):
    paths = tls.ensure_ca(tmp_path / "tls")
    before = _stamp(*paths)
    assert tls.ensure_ca(tmp_path / "tls") == paths
    assert _stamp(*paths) == before
    assert tls.ensure_ca(tmp_path / "elsewhere")[0].read_bytes() != paths[0].read_bytes()  # each CA its own


@pytest.mark.parametrize("lost", [tls.CA_CERT, tls.CA_KEY])
def test_a_half_ca_is_an_error_naming_the_file_left(tmp_path, lost):
    tls_dir = tmp_path / "tls"
    tls.ensure_ca(tls_dir)
    (tls_dir / lost).unlink()
    kept = tls_dir / ({tls.CA_CERT, tls.CA_KEY} - {lost}).pop()
    before = _stamp(kept)
    with pytest.raises(InvalidInput) as e:
        tls.ensure_ca(tls_dir)
    assert str(kept) in str(e.value) and lost in str(e.value) and "\n" not in str(e.value)
    assert _stamp(kept) == before and not (tls_dir / lost).exists()
    with pytest.raises(InvalidInput):  # nor does the service's certificate make one up
        tls.ensure_server_cert(tls_dir, ["localhost"])


def test_a_ca_whose_key_is_not_its_own_is_an_error(tmp_path):
    a, b = tls.ensure_ca(tmp_path / "a"), tls.ensure_ca(tmp_path / "b")
    b[1].write_bytes(a[1].read_bytes())
    with pytest.raises(InvalidInput, match="does not match") as e:
        tls.ensure_ca(tmp_path / "b")
    assert str(b[1]) in str(e.value) and "PRIVATE KEY" not in str(e.value)


# ---- issue, with a real TLS handshake ----------------------------------------------------------
def _handshake(tmp_path: Path, served: tuple[bytes, bytes], client: ssl.SSLContext, hostname: str) -> bytes:
    """Serve `served` (certificate, key) on 127.0.0.1 in a thread and connect to it with
    `client` for `hostname`: what the client read, or the client's error raised."""
    cert_path, key_path = tmp_path / "served.pem", tmp_path / "served.key"
    cert_path.write_bytes(served[0])
    key_path.write_bytes(served[1])
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert_path, key_path)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(5)

        def serve() -> None:
            try:
                conn, _ = listener.accept()
                conn.settimeout(5)
                with server.wrap_socket(conn, server_side=True) as s:
                    s.sendall(b"ok")
            except OSError:  # the client refused the certificate (ssl.SSLError is an OSError)
                pass

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            with socket.create_connection(listener.getsockname(), timeout=5) as raw, \
                    client.wrap_socket(raw, server_hostname=hostname) as s:
                return s.recv(2)
        finally:
            thread.join(5)
            assert not thread.is_alive()


def test_an_issued_certificate_is_accepted_by_a_client_trusting_the_ca(tmp_path):
    ca_path, ca_key_path = tls.ensure_ca(tmp_path / "tls")
    served = tls.issue(ca_path.read_bytes(), ca_key_path.read_bytes(), ["127.0.0.1", "localhost"])
    client = client_context(ca_path)
    assert client.check_hostname and client.verify_mode == ssl.CERT_REQUIRED
    assert _handshake(tmp_path, served, client, "127.0.0.1") == b"ok"
    strict = ssl.create_default_context(cafile=str(ca_path))  # what newer Pythons check by default
    strict.verify_flags |= ssl.VERIFY_X509_STRICT
    assert _handshake(tmp_path, served, strict, "localhost") == b"ok"


def test_a_client_refuses_it_for_another_ca_or_another_name(tmp_path):
    ca_path, ca_key_path = tls.ensure_ca(tmp_path / "tls")
    served = tls.issue(ca_path.read_bytes(), ca_key_path.read_bytes(), ["127.0.0.1", "localhost"])
    other_ca_path, _ = tls.ensure_ca(tmp_path / "other")
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(tmp_path, served, client_context(other_ca_path), "127.0.0.1")
    with pytest.raises(ssl.SSLCertVerificationError, match="other.example"):
        _handshake(tmp_path, served, client_context(ca_path), "other.example")


def test_an_issued_certificate_names_and_uses(ca):
    cert = _cert(tls.issue(*ca, ["node-1.example.com", "192.0.2.5", "2001:db8::1", "192.0.2.5"], days=10)[0])
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["node-1.example.com"]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["192.0.2.5", "2001:db8::1"]
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "node-1.example.com"
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.ExtendedKeyUsageOID.SERVER_AUTH in usages and x509.ExtendedKeyUsageOID.CLIENT_AUTH in usages
    ca_ski = _cert(ca[0]).extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    aki = cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    assert aki.key_identifier == ca_ski.digest
    assert datetime.timedelta(days=9) < cert.not_valid_after_utc - datetime.datetime.now(UTC) <= 10 * DAY
    assert cert.not_valid_before_utc < datetime.datetime.now(UTC) - datetime.timedelta(minutes=4)


@pytest.mark.parametrize("names", [[], [""], ["  "]])
def test_a_certificate_for_no_name_is_refused(ca, names):
    with pytest.raises(InvalidInput):
        tls.issue(*ca, names)


# ---- ensure_server_cert --------------------------------------------------------------------
def test_the_service_certificate_is_made_once(tmp_path):
    paths = tls.ensure_server_cert(tmp_path / "tls", ["127.0.0.1", "undercloud.local"])
    assert [p.name for p in paths] == [tls.SERVICE_CERT, tls.SERVICE_KEY]
    assert _mode(paths[0]) == 0o644 and _mode(paths[1]) == 0o600
    ca_pem = (tmp_path / "tls" / tls.CA_CERT).read_bytes()
    tls.check_pair(*_read(paths), names=["127.0.0.1", "undercloud.local"], ca_pem=ca_pem)
    before = _stamp(*paths)
    assert tls.ensure_server_cert(tmp_path / "tls", ["undercloud.local", "127.0.0.1"]) == paths
    assert tls.ensure_server_cert(tmp_path / "tls", ["127.0.0.1"]) == paths  # a name fewer: still covered
    assert _stamp(*paths) == before


def test_the_service_certificate_is_issued_again_for_a_new_name(tmp_path):
    paths = tls.ensure_server_cert(tmp_path / "tls", ["127.0.0.1"])
    before = _read(paths)
    tls.ensure_server_cert(tmp_path / "tls", ["127.0.0.1", "192.0.2.1"])
    after = _read(paths)
    assert after[0] != before[0] and after[1] != before[1]
    tls.check_pair(*after, names=["127.0.0.1", "192.0.2.1"])
    assert _mode(paths[1]) == 0o600


def test_the_service_certificate_is_issued_again_near_its_end(tmp_path):
    now = datetime.datetime.now(UTC)
    paths = tls.ensure_server_cert(tmp_path / "tls", ["localhost"], now=now)
    before = _read(paths)
    tls.ensure_server_cert(tmp_path / "tls", ["localhost"], now=now + 300 * DAY)  # 65 days left: kept
    assert _read(paths) == before
    later = now + 340 * DAY  # 25 days left: within RENEW_WITHIN
    tls.ensure_server_cert(tmp_path / "tls", ["localhost"], now=later)
    assert _read(paths) != before
    assert tls.expiry(paths[0].read_bytes()) - later > tls.RENEW_WITHIN
    again = _read(paths)
    tls.ensure_server_cert(tmp_path / "tls", ["localhost"], now=later)  # renewed: kept from then on
    assert _read(paths) == again


def test_the_service_certificate_is_issued_again_when_the_clock_is_before_its_start(tmp_path):
    # made while the clock was ahead (then set right): clients would refuse it until then
    now = datetime.datetime.now(UTC)
    paths = tls.ensure_server_cert(tmp_path / "tls", ["localhost"], now=now + 10 * DAY)
    before = _read(paths)
    tls.ensure_server_cert(tmp_path / "tls", ["localhost"], now=now)
    assert _read(paths) != before
    tls.check_pair(*_read(paths), names=["localhost"], now=now)


def test_the_service_certificate_is_issued_again_for_a_new_ca(tmp_path):
    tls_dir = tmp_path / "tls"
    paths = tls.ensure_server_cert(tls_dir, ["localhost"])
    before = _read(paths)
    old_ca = (tls_dir / tls.CA_CERT).read_bytes()
    (tls_dir / tls.CA_CERT).unlink()
    (tls_dir / tls.CA_KEY).unlink()
    tls.ensure_server_cert(tls_dir, ["localhost"])
    new_ca = (tls_dir / tls.CA_CERT).read_bytes()
    assert new_ca != old_ca and _read(paths) != before
    tls.check_pair(*_read(paths), names=["localhost"], ca_pem=new_ca)


def test_a_service_certificate_without_its_own_key_is_issued_again(tmp_path):
    # what a crash between writing the key and the certificate leaves
    paths = tls.ensure_server_cert(tmp_path / "tls", ["localhost"])
    paths[1].write_bytes(tls.issue((tmp_path / "tls" / tls.CA_CERT).read_bytes(),
                                   (tmp_path / "tls" / tls.CA_KEY).read_bytes(), ["localhost"])[1])
    tls.ensure_server_cert(tmp_path / "tls", ["localhost"])
    tls.check_pair(*_read(paths), names=["localhost"])


# ---- check_pair ------------------------------------------------------------------------------
def _refused(cert_pem: bytes, key_pem: bytes, reason: str, **kw) -> InvalidInput:
    with pytest.raises(InvalidInput) as e:
        tls.check_pair(cert_pem, key_pem, **kw)
    text = str(e.value)
    assert reason in text and "\n" not in text and "PRIVATE KEY" not in text and "Traceback" not in text
    return e.value


def test_a_good_pair_passes(ca):
    cert, key = tls.issue(*ca, ["overcloud.example.com", "192.0.2.10"])
    tls.check_pair(cert, key)
    tls.check_pair(cert, key, names=["OVERCLOUD.example.com.", "192.0.2.10"], ca_pem=ca[0],
                   now=datetime.datetime.now(UTC) + 300 * DAY)


def test_a_key_not_the_certificates_is_refused(ca):
    cert, _ = tls.issue(*ca, ["a.example.com"])
    _, other_key = tls.issue(*ca, ["a.example.com"])
    _refused(cert, other_key, "does not match")


def test_an_expired_or_not_yet_valid_certificate_is_refused(ca):
    cert, key = tls.issue(*ca, ["a.example.com"], days=30)
    _refused(cert, key, "expired", now=datetime.datetime.now(UTC) + 31 * DAY)
    _refused(cert, key, "not valid before", now=datetime.datetime.now(UTC) - DAY)


def test_a_name_the_certificate_does_not_cover_is_refused(ca):
    cert, key = tls.issue(*ca, ["a.example.com", "192.0.2.10"])
    _refused(cert, key, "does not cover b.example.com", names=["a.example.com", "b.example.com"])
    _refused(cert, key, "does not cover 192.0.2.11", names=["192.0.2.11"])
    _refused(cert, key, "does not cover 2001:db8::1", names=["2001:db8::1"])


def test_a_wildcard_covers_one_label(ca):
    cert, key = tls.issue(*ca, ["*.example.com"])
    tls.check_pair(cert, key, names=["a.example.com", "B.Example.com"])
    for name in ("a.b.example.com", "example.com", "a.example.org"):
        _refused(cert, key, f"does not cover {name}", names=[name])


def test_the_cn_counts_only_without_sans(ca):
    key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _cert(ca[0])
    now = datetime.datetime.now(UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "legacy.example.com")]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - DAY).not_valid_after(now + DAY)
            .sign(serialization.load_pem_private_key(ca[1], None), hashes.SHA256()))  # type: ignore[arg-type]
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    tls.check_pair(cert_pem, key_pem, names=["legacy.example.com"], ca_pem=ca[0])
    _refused(cert_pem, key_pem, "does not cover other.example.com", names=["other.example.com"])
    # with SANs the CN is not looked at: issue() puts the first name in both, so build one apart
    cert2, key2 = tls.issue(*ca, ["a.example.com"])
    _refused(cert2, key2, "does not cover legacy.example.com", names=["legacy.example.com"])


def test_a_certificate_of_another_ca_is_refused(ca, other_ca):
    cert, key = tls.issue(*other_ca, ["a.example.com"])
    _refused(cert, key, "not signed by the given CA", ca_pem=ca[0])
    tls.check_pair(cert, key, ca_pem=ca[0] + other_ca[0])  # a bundle holding its CA


def test_a_certificate_chained_through_an_intermediate_is_accepted(ca):
    # the operator's file holds the server certificate, then the intermediate that signed it
    ca_cert = _cert(ca[0])
    ca_key = serialization.load_pem_private_key(ca[1], None)
    mid_key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(UTC)
    mid_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "intermediate")])
    mid = (x509.CertificateBuilder().subject_name(mid_name).issuer_name(ca_cert.subject)
           .public_key(mid_key.public_key()).serial_number(x509.random_serial_number())
           .not_valid_before(now - DAY).not_valid_after(now + 30 * DAY)
           .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
           .add_extension(x509.SubjectKeyIdentifier.from_public_key(mid_key.public_key()), critical=False)
           .sign(ca_key, hashes.SHA256()))  # type: ignore[arg-type]
    mid_pem = mid.public_bytes(serialization.Encoding.PEM)
    mid_key_pem = mid_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption())
    cert, key = tls.issue(mid_pem, mid_key_pem, ["a.example.com"])
    tls.check_pair(cert + mid_pem, key, names=["a.example.com"], ca_pem=ca[0])
    _refused(cert, key, "not signed by the given CA", ca_pem=ca[0])  # without the intermediate


def test_garbage_is_refused_without_showing_it(ca):
    cert, key = tls.issue(*ca, ["a.example.com"])
    _refused(b"not a certificate", key, "not a PEM certificate")
    _refused(key, key, "not a PEM certificate")  # the key given as the certificate: not echoed
    _refused(cert, b"-----BEGIN PRIVATE KEY-----\ngarbage\n-----END PRIVATE KEY-----\n", "not a PEM private key")
    _refused(cert, cert, "not a PEM private key")
    _refused(cert, key, "the CA is not a PEM certificate", ca_pem=b"garbage")
    encrypted = serialization.load_pem_private_key(key, None).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"))
    _refused(cert, encrypted, "encrypted")


def test_an_error_says_where(ca):
    cert, key = tls.issue(*ca, ["a.example.com"])
    error = _refused(cert, key, "does not cover", names=["b.example.com"], where="SSLCertificate")
    assert str(error).startswith("SSLCertificate: ") and error.where == "SSLCertificate"


# ---- expiry -----------------------------------------------------------------------------------
def test_expiry(ca):
    cert, _ = tls.issue(*ca, ["a.example.com"], days=20)
    end = tls.expiry(cert)
    assert end.tzinfo is not None and end.utcoffset() == datetime.timedelta(0)
    assert 19 * DAY < end - datetime.datetime.now(UTC) <= 20 * DAY
    with pytest.raises(InvalidInput):
        tls.expiry(b"garbage")


def test_homes_given_one_seed_make_one_ca_and_trust_each_others_certificates(tmp_path):
    """The workers of one store derive their CA from its key: a certificate one issues is
    verified with another's ca.pem; another seed is another CA."""
    a_cert, a_key = tls.ensure_ca(tmp_path / "a", seed=b"the store's key, derived")
    b_cert, _ = tls.ensure_ca(tmp_path / "b", seed=b"the store's key, derived")
    c_cert, _ = tls.ensure_ca(tmp_path / "c", seed=b"another store")
    a, b, c = (x509.load_pem_x509_certificate(p.read_bytes()) for p in (a_cert, b_cert, c_cert))
    key = serialization.PublicFormat.SubjectPublicKeyInfo
    assert (a.subject, a.public_key().public_bytes(serialization.Encoding.DER, key), a.not_valid_before_utc) == \
        (b.subject, b.public_key().public_bytes(serialization.Encoding.DER, key), b.not_valid_before_utc)
    assert a.subject != c.subject and a.public_key() != c.public_key()
    assert stat.S_IMODE(a_key.stat().st_mode) == 0o600
    served = tls.issue(a_cert.read_bytes(), a_key.read_bytes(), ["127.0.0.1"])
    assert _handshake(tmp_path, served, ssl.create_default_context(cafile=str(b_cert)), "127.0.0.1") == b"ok"
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(tmp_path, served, ssl.create_default_context(cafile=str(c_cert)), "127.0.0.1")
    # kept as it is once made: the seed is read only to make it
    before = a_cert.read_bytes()
    tls.ensure_ca(tmp_path / "a", seed=b"another store")
    assert a_cert.read_bytes() == before
