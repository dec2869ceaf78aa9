"""`overcloud status`'s rows, from what the nodes' agents report (GET /v1/overclouds/STACK/status).

Nothing is probed from the undercloud: each node's agent runs its Pods' readiness probes
itself (agent/watchdog.py), on the node, so a node on any host and any network is checked
the same way. The service asks the agents for a fresh report (a request in their documents)
and waits a few seconds; a node whose report does not answer that request shows `unknown`
with the age of its last report, never an older "healthy" as if it were now.
"""

from __future__ import annotations

from undercloud.agent import pod_spec

RUNNING = ("running", "supervised")  # supervised: a process-mode Pod, its supervisor restarts what exits


def _age(report: dict, now: float) -> str:
    at = report.get("reported_at")
    return f"last report {max(0, round(now - float(at)))} s ago" if isinstance(at, (int, float)) else "no report time"


def health(svc: list, report: dict | None, asked: float | None, now: float) -> str:
    """One service's health on one node, from its agent's report: "healthy", "failing (why)",
    or "unknown (why)" when the report is missing or older than the request `asked`."""
    if report is None:
        return "unknown (no report from its agent)"
    if asked is not None and "answers" not in report:
        return f"unknown (its agent answers no request for a report: an older one; {_age(report, now)})"
    if asked is not None and (report.get("answers") or 0) < asked:
        return f"unknown (no fresh report: {_age(report, now)})"
    pod = (svc[3:4] or [None])[0]
    seen = (report.get("pods") or {}).get(pod)
    if not seen:
        return f"failing (pod {pod} not running on the node)"
    containers = seen.get("containers") or {}
    result = "healthy"
    for container, _spec in (svc[4:5] or [[]])[0] or []:
        rec = containers.get(container)
        if rec is None:
            result = "failing (container missing)"
        elif rec.get("state") not in RUNNING:
            result = f"failing (container {rec.get('state')})"
        else:
            result = rec.get("ready") or "unknown (its agent did not run the readiness probe)"
        if result != "healthy":
            return result
    stopped = sorted(f"{c} {x.get('state')}" for c, x in containers.items() if x.get("state") not in RUNNING)
    return f"failing ({', '.join(stopped)})" if stopped else "healthy"


def health_check(svc: list) -> str:
    """What a service without a declared health_check is checked by: its readiness probes."""
    return "; ".join(pod_spec.probe_text(spec) for _c, spec in (svc[4:5] or [[]])[0] or [] if isinstance(spec, dict))


def targets(outputs: dict, only: str | None = None) -> list[tuple[str, str, str, list]]:
    """(role, node, address, service) for every service of every node (or of node `only`),
    from the stack outputs RoleNodes and RoleServices."""
    nodes, services = outputs.get("RoleNodes") or {}, outputs.get("RoleServices") or {}
    return [(role, node, address, svc) for role, members in sorted(nodes.items())
            for node, address in sorted((members or {}).items()) if only in (None, node)
            for svc in services.get(role) or []]


# The stack outputs of the certificates, and the services that serve each.
SERVED = {"PublicCertificate": ("haproxy",), "InternalCertificate": ("haproxy", "mysql", "rabbitmq")}


def certificates(outputs: dict) -> dict[str, str]:
    """Service -> when the certificate it serves ends (ISO 8601, UTC), the soonest when it
    serves two: the public endpoints' (haproxy) and with internal TLS the internal one
    (haproxy, MariaDB, RabbitMQ)."""
    from undercloud import tls
    from undercloud.errors import InvalidInput

    out: dict[str, str] = {}
    for key, services in SERVED.items():
        pem = outputs.get(key)
        if not isinstance(pem, str) or not pem:
            continue
        try:
            ends = tls.expiry(pem.encode()).strftime("%Y-%m-%dT%H:%M:%SZ")
        except InvalidInput:
            continue
        for service in services:
            out[service] = min(out.get(service, ends), ends)
    return out


def rows(todo: list[tuple[str, str, str, list]], reports: dict[str, dict | None], asked: float | None,
         now: float, certificates: dict[str, str] | None = None) -> list[dict]:
    """One row per (role, node, address, service): its health (see `health`), from the
    node's last report its restarts, image, config and last restart's reason, and when the
    certificate it serves ends (`certificates`, else None)."""
    out = []
    for role, node, address, svc in todo:
        report = reports.get(node)
        pod = (svc[3:4] or [None])[0]
        seen = ((report or {}).get("pods") or {}).get(pod) or {}
        containers = seen.get("containers") or {}
        last = max((x.get("last_restart") or {} for x in containers.values()), key=lambda r: r.get("at", ""),
                   default={})
        out.append({"role": role, "node": node, "address": address, "service": svc[0], "step": svc[1],
                    "health_check": svc[2] or health_check(svc), "health": health(svc, report, asked, now),
                    "restarts": sum(int(x.get("restarts") or 0) for x in containers.values()) if seen else None,
                    "image": ",".join(sorted({x.get("image_id") or x.get("image", "") for x in containers.values()})),
                    "config": seen.get("config", ""), "last_restart": last.get("why", ""),
                    "certificate_expires": (certificates or {}).get(svc[0])})
    return out
