"""The overcloud's public certificate (overcloud/public_tls.py): issued by the undercloud's CA
for the VIP and the cloud's name, kept, renewed within 30 days of its end; an operator's own
checked before anything changes, each fault one line without key material."""

from __future__ import annotations

import datetime
import ssl

import pytest
import yaml
from cryptography import x509

from tests.conftest import run_cli
from undercloud import tls
from undercloud.errors import InvalidInput
from undercloud.overcloud import public_tls

NOW = datetime.datetime(2026, 12, 5, tzinfo=datetime.UTC)
VIP = "192.0.2.250"


def sans(pem: str) -> set[str]:
    cert = x509.load_pem_x509_certificate(pem.encode())
    ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {str(v) for v in ext.get_values_for_type(x509.IPAddress)} | set(ext.get_values_for_type(x509.DNSName))


def env(tmp_path, name: str, **defaults) -> object:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"parameter_defaults": defaults}))
    return path


def test_the_undercloud_issues_it_for_the_vip_and_name_keeps_it_and_renews_it(tmp_path):
    home, ca_dir = tmp_path / "home", tmp_path / "home" / "tls"
    first = public_tls.ensure(home, ca_dir, "overcloud", [], VIP, NOW)
    assert first.issued and first.ca_file == ca_dir / "ca.pem"
    cert = first.parameters["SSLCertificate"]
    assert sans(cert) == {VIP, "overcloud.localdomain"}
    assert first.expires == NOW + datetime.timedelta(days=365)
    key_file = home / "overcloud" / "overcloud" / "tls" / "public.key"
    assert key_file.stat().st_mode & 0o777 == 0o600 and first.parameters["SSLKey"] == key_file.read_text()
    # Verified by the undercloud's CA, as clients (clouds.yaml's cacert) do.
    ctx = ssl.create_default_context(cafile=str(first.ca_file))
    assert ctx.load_verify_locations(cafile=str(first.ca_file)) is None
    tls.check_pair(cert.encode(), first.parameters["SSLKey"].encode(), names=[VIP],
                   ca_pem=first.ca_file.read_bytes(), now=NOW)
    # Kept while nothing changed; issued again for a new VIP or name, and 30 days before its end.
    assert public_tls.ensure(home, ca_dir, "overcloud", [], VIP, NOW + datetime.timedelta(days=300)).parameters == \
        first.parameters
    renewed = public_tls.ensure(home, ca_dir, "overcloud", [], VIP, NOW + datetime.timedelta(days=340))
    assert renewed.parameters["SSLCertificate"] != cert
    assert renewed.expires == NOW + datetime.timedelta(days=340 + 365)
    named = public_tls.ensure(home, ca_dir, "overcloud", [env(tmp_path, "n.yaml", CloudName="cloud.example.com")],
                              "192.0.2.251", NOW)
    assert sans(named.parameters["SSLCertificate"]) == {"192.0.2.251", "cloud.example.com"}


def test_none_without_a_vip_known_and_a_dry_run_writes_nothing(tmp_path):
    home, ca_dir = tmp_path / "home", tmp_path / "home" / "tls"
    assert public_tls.ensure(home, ca_dir, "inner", [], None, NOW) is None  # nodes of another cloud
    assert public_tls.ensure(home, ca_dir, "overcloud", [], VIP, NOW, write=False) is None
    assert not (home / "overcloud").exists() and not ca_dir.exists()
    made = public_tls.ensure(home, ca_dir, "overcloud", [], VIP, NOW)
    # A dry run long after: the kept one as it is, not renewed.
    later = public_tls.ensure(home, ca_dir, "overcloud", [], VIP, NOW + datetime.timedelta(days=360), write=False)
    assert later.parameters == made.parameters


@pytest.fixture
def operator(tmp_path):
    """An operator's CA, and a certificate of it for the VIP and cloud.example.com."""
    ca, ca_key = tls.ensure_ca(tmp_path / "their-ca")
    cert, key = tls.issue(ca.read_bytes(), ca_key.read_bytes(), [VIP, "cloud.example.com"])
    return {"ca": ca, "cert": cert.decode(), "key": key.decode()}


def test_an_operators_certificate_is_used_as_given_with_its_ca(tmp_path, operator):
    home, ca_dir = tmp_path / "home", tmp_path / "home" / "tls"
    e = env(tmp_path, "tls.yaml", SSLCertificate=operator["cert"], SSLKey=operator["key"],
            PublicTLSCAFile=operator["ca"].read_text(), CloudName="cloud.example.com")
    got = public_tls.ensure(home, ca_dir, "overcloud", [e], VIP)
    assert not got.issued and got.parameters == {}  # the environment gives them to the stack
    assert got.ca_file.read_bytes() == operator["ca"].read_bytes()
    assert not ca_dir.exists()  # the undercloud's CA is not involved
    by_path = env(tmp_path, "path.yaml", SSLCertificate=operator["cert"], SSLKey=operator["key"],
                  PublicTLSCAFile=str(operator["ca"]))
    assert public_tls.ensure(home, ca_dir, "overcloud", [by_path], VIP).ca_file.read_bytes() == \
        operator["ca"].read_bytes()
    # Without a CA: clients use their system's trust store.
    bare = env(tmp_path, "bare.yaml", SSLCertificate=operator["cert"], SSLKey=operator["key"])
    assert public_tls.ensure(home, ca_dir, "overcloud", [bare], VIP).ca_file is None


def bad_cases(tmp_path, operator):
    other_ca, other_key = tls.ensure_ca(tmp_path / "other-ca")
    _, stranger_key = tls.issue(other_ca.read_bytes(), other_key.read_bytes(), [VIP])
    expired, expired_key = tls._issue(operator["ca"].read_bytes(), (tmp_path / "their-ca" / "ca.key").read_bytes(),
                                      [VIP], days=1,
                                      now=datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=10))
    base = {"SSLCertificate": operator["cert"], "SSLKey": operator["key"]}
    return [
        ({**base, "SSLKey": stranger_key.decode()}, "SSLCertificate: the key does not match the certificate"),
        ({"SSLCertificate": expired.decode(), "SSLKey": expired_key.decode()},
         "SSLCertificate: the certificate expired on"),
        ({**base, "CloudName": "other.example.com"}, "SSLCertificate: the certificate does not cover other.example.com"),
        ({**base, "PublicTLSCAFile": other_ca.read_text()}, "SSLCertificate: the certificate is not signed by the given CA"),
        ({**base, "PublicTLSCAFile": "their-ca.pem"}, "PublicTLSCAFile: give the CA's PEM or an absolute path"),
        ({**base, "PublicTLSCAFile": str(tmp_path / "nowhere.pem")}, "PublicTLSCAFile: "),
        ({"SSLKey": operator["key"]}, "SSLCertificate: SSLCertificate and SSLKey come together"),
        ({**base, "SSLCertificate": "garbage"}, "SSLCertificate: the certificate is not a PEM certificate"),
    ]


def test_a_bad_operator_certificate_is_one_line_without_key_material(tmp_path, operator):
    home, ca_dir = tmp_path / "home", tmp_path / "home" / "tls"
    for i, (given, words) in enumerate(bad_cases(tmp_path, operator)):
        e = env(tmp_path, f"bad{i}.yaml", **given)
        with pytest.raises(InvalidInput) as caught:
            public_tls.ensure(home, ca_dir, "overcloud", [e], VIP)
        text = str(caught.value)
        assert text.startswith(words), (i, text)
        assert "\n" not in text and "PRIVATE KEY" not in text and operator["key"].splitlines()[1] not in text
    # The wrong name is also found for the VIP alone (no CloudName given).
    other = tls.issue(operator["ca"].read_bytes(), (tmp_path / "their-ca" / "ca.key").read_bytes(), ["192.0.2.9"])
    e = env(tmp_path, "vip.yaml", SSLCertificate=other[0].decode(), SSLKey=other[1].decode())
    with pytest.raises(InvalidInput, match=f"does not cover {VIP}"):
        public_tls.ensure(home, ca_dir, "overcloud", [e], VIP)
    assert not (home / "overcloud" / "overcloud" / "tls").exists()  # nothing written for any of them


def test_deploy_refuses_a_bad_certificate_in_one_line(uc_home, tmp_path, operator):
    """Through the service's deploy workflow (its dry run: a new stack, nothing made)."""
    other_ca, other_key = tls.ensure_ca(tmp_path / "other-ca")
    _, stranger_key = tls.issue(other_ca.read_bytes(), other_key.read_bytes(), [VIP])
    e = env(tmp_path, "tls.yaml", SSLCertificate=operator["cert"], SSLKey=stranger_key.decode())
    r = run_cli("deploy", "--dry-run", "-e", str(e), "--stack", "overcloud")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert r.stderr.splitlines()[-1] == "error: SSLCertificate: the key does not match the certificate"
    assert stranger_key.decode().splitlines()[1] not in r.stderr + r.stdout
    assert run_cli("stack", "list", "-f", "json").stdout.strip() == "[]"


def test_the_deploy_says_what_its_public_endpoints_speak(tmp_path):
    """One line: TLS and whose certificate until when; plain HTTP and why; nothing for an
    overcloud without an API endpoint (hypervisor hosts)."""
    from types import SimpleNamespace

    from undercloud.overcloud import workflows

    home = SimpleNamespace(path=tmp_path / "home", tls_dir=tmp_path / "home" / "tls")
    client = SimpleNamespace(home=home)
    apis = SimpleNamespace(enabled=[SimpleNamespace(endpoints={}), SimpleNamespace(endpoints={"image": {}})])
    notes: list[str] = []
    out = SimpleNamespace(note=notes.append)
    got = workflows.public_certificate(client, out, "overcloud", apis, [], VIP)
    assert got.issued and notes == [
        f"public endpoints: TLS, a certificate of the undercloud's CA, valid until {got.expires:%Y-%m-%d}"]
    assert workflows.public_certificate(client, out, "inner", apis, [], None) is None
    assert notes[-1].startswith("public endpoints: plain HTTP (the virtual IP is known only once the nodes exist")
    hosts = SimpleNamespace(enabled=[SimpleNamespace(endpoints={})])
    assert workflows.public_certificate(client, out, "hosts", hosts, [], VIP) is None and len(notes) == 2
