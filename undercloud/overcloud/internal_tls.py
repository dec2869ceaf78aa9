"""TLS inside the overcloud (`environments/tls-everywhere.yaml`: EnableInternalTLS).

The undercloud's CA issues one internal certificate per overcloud, for its virtual IP and
`CloudNameInternal` (default `<stack>.internalapi.localdomain`), as Kolla-Ansible has one
internal and one backend certificate: haproxy serves the internal endpoints with it,
MariaDB (reached through haproxy's tcp frontend on the VIP) and RabbitMQ their clients. It
is kept in the stack's directory (`tls/internal.pem`, `tls/internal.key` 0600) and issued
again only when the VIP or the name changed, within 30 days of its end, or when the CA
changed (`tls.ensure_cert`). The deploy passes it as InternalTLSCertificate and
InternalTLSKey (hidden), and the CA as InternalTLSCA: every service container trusts that
CA alone for its internal calls.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from undercloud import tls
from undercloud.errors import InvalidInput
from undercloud.overcloud.secrets import secrets_given, stack_dir

GIVEN = ("EnableInternalTLS", "CloudNameInternal")


@dataclass
class InternalTLS:
    parameters: dict[str, str]  # for the stack's parameter_defaults
    expires: datetime.datetime | None  # None: a dry run before the first is issued


def enabled(environments: list[Path]) -> bool:
    """EnableInternalTLS as the environments set it (the last wins); one line when it is no
    boolean."""
    from undercloud.orchestration.template.parameters import to_bool  # Heat's boolean values

    value = secrets_given(environments, {"EnableInternalTLS"}).get("EnableInternalTLS", "false")
    try:
        return to_bool(value)
    except ValueError:
        raise InvalidInput(f"{value.strip()[:32]!r} is not a boolean (true or false)", "EnableInternalTLS") from None


def ensure(home: Path, ca_dir: Path, stack: str, environments: list[Path], vip: str | None,
           now: datetime.datetime | None = None, *, write: bool = True) -> InternalTLS | None:
    """The internal certificate of `stack` for this deploy, issued or renewed when needed;
    None without EnableInternalTLS. Without `write` (a dry run) nothing is issued: the kept
    certificate as it is, else a placeholder of the one a deploy would issue."""
    if not enabled(environments):
        return None
    if not vip:
        raise InvalidInput("internal TLS needs the virtual IP before the deploy (its certificate names it): "
                           "nodes of another cloud have none", "EnableInternalTLS")
    given = secrets_given(environments, set(GIVEN))
    base = stack_dir(home, stack)
    cert, key = base / "tls" / "internal.pem", base / "tls" / "internal.key"
    if write:
        tls.ensure_cert(ca_dir, cert, key, [vip, given.get("CloudNameInternal") or f"{stack}.internalapi.localdomain"],
                        now=now)
    elif not (cert.is_file() and key.is_file()):
        would = "(would issue the internal certificate)"
        return InternalTLS({"InternalTLSCertificate": would, "InternalTLSKey": would, "InternalTLSCA": would}, None)
    cert_pem = cert.read_text()
    return InternalTLS({"InternalTLSCertificate": cert_pem, "InternalTLSKey": key.read_text(),
                        "InternalTLSCA": (ca_dir / tls.CA_CERT).read_text()}, tls.expiry(cert_pem.encode()))
