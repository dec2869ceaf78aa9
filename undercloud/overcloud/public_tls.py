"""The certificate of the overcloud's public endpoints (haproxy on the virtual IP, TLS).

By default the undercloud's CA issues it at each deploy (`tls.ensure_cert`) for the VIP and
the cloud's name (`CloudName`, default `<stack>.localdomain`), kept in the stack's directory
(`tls/public.pem`, `tls/public.key` 0600) and issued again only when the VIP or the name
changed, within 30 days of its end, or when the CA changed; the deploy passes it to the
stack as SSLCertificate and SSLKey (hidden). Clients verify it with the undercloud's CA.

An operator's own comes by environment, as TripleO took it: `SSLCertificate`, `SSLKey` and
`PublicTLSCAFile` (the CA that signed it, as PEM or an absolute path on this host; without
one, clients use their system's trust store). It is checked before anything changes: key and
certificate belong together, valid now, for the VIP (and CloudName when one is given), signed
by that CA; each fault one line, no key material.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from undercloud import tls
from undercloud.agent.files import write_atomic
from undercloud.errors import InvalidInput
from undercloud.overcloud.secrets import secrets_given, stack_dir

GIVEN = ("SSLCertificate", "SSLKey", "PublicTLSCAFile", "CloudName")


@dataclass
class PublicTLS:
    parameters: dict[str, str]  # for the stack's parameter_defaults: what the undercloud issued (else none)
    ca_file: Path | None  # what clients verify with (None: their system's trust store)
    expires: datetime.datetime
    issued: bool  # the undercloud's CA issued it (False: the operator's)


def cloud_name(stack: str, given: dict[str, str]) -> str:
    return given.get("CloudName") or f"{stack}.localdomain"


def ensure(home: Path, ca_dir: Path, stack: str, environments: list[Path], vip: str | None,
           now: datetime.datetime | None = None, *, write: bool = True) -> PublicTLS | None:
    """The public certificate of `stack` for this deploy: the operator's, checked, or the
    undercloud's, issued or renewed when needed. None when there is none to have: no
    certificate given and no VIP known before the deploy (nodes of another cloud). Without
    `write` (a dry run) nothing is issued or written: the kept certificate as it is, if any."""
    given = secrets_given(environments, set(GIVEN))
    base = stack_dir(home, stack)
    if given.get("SSLCertificate") or given.get("SSLKey"):
        return _operators(base, given, vip, now, write)
    cert, key = base / "tls" / "public.pem", base / "tls" / "public.key"
    if not write:
        if not (cert.is_file() and key.is_file()):
            return None
    elif not vip:
        return None
    else:
        tls.ensure_cert(ca_dir, cert, key, [vip, cloud_name(stack, given)], now=now)
    cert_pem = cert.read_text()
    return PublicTLS({"SSLCertificate": cert_pem, "SSLKey": key.read_text()}, ca_dir / tls.CA_CERT,
                     tls.expiry(cert_pem.encode()), issued=True)


def _operators(base: Path, given: dict[str, str], vip: str | None, now: datetime.datetime | None,
               write: bool) -> PublicTLS:
    cert, key = given.get("SSLCertificate", ""), given.get("SSLKey", "")
    if not cert or not key:
        raise InvalidInput("SSLCertificate and SSLKey come together: the environments give "
                           f"{'SSLCertificate' if cert else 'SSLKey'} alone", "SSLCertificate")
    ca_pem = _ca(given.get("PublicTLSCAFile", ""))
    names = [n for n in (vip, given.get("CloudName")) if n]
    tls.check_pair(cert.encode(), key.encode(), names=names, ca_pem=ca_pem, now=now, where="SSLCertificate")
    ca_file = None
    if ca_pem is not None:
        ca_file = base / "tls" / "public-ca.pem"
        if write:
            write_atomic(ca_file, ca_pem, 0o644)
    return PublicTLS({}, ca_file, tls.expiry(cert.encode()), issued=False)


def _ca(value: str) -> bytes | None:
    """PublicTLSCAFile's CA: PEM text, or the file at an absolute path on this host."""
    if not value:
        return None
    if "-----BEGIN" in value:
        return value.encode()
    path = Path(value)
    if not path.is_absolute():
        raise InvalidInput("give the CA's PEM or an absolute path on the undercloud's host", "PublicTLSCAFile")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"{path}: {exc.strerror or exc}", "PublicTLSCAFile") from None
