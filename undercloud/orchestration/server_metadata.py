"""Per-server metadata and tokens: how configuration reaches a server's agent.

Provisioning-neutral: OS::Heat::DeployedServer, OS::Nova::Server (first-boot data) and the
software-deployment resources all use it.

    meta = ctx.server_metadata
    token = meta.register(server_id, name)       # new token (rotates any earlier one)
    meta.agent_config(server_id, token)          # what the agent needs: url, server_id, token
    meta.put_deployment(server_id, entry)        # Heat-shaped entry with a fresh `id`
    meta.remove_deployment(deployment_id)
    meta.signal_of(deployment_id)                # the agent's signal, or None
    meta.forget(server_id)

The store is the truth; every server's document (JSON bytes), ETag and Last-Modified are
kept in memory, so a poll costs a dict lookup and a hash compare, never a query. Changes
wake long-polls waiting on that server. With several workers on one store, each takes up
what the others wrote at every heartbeat (`refresh`: servers whose revision moved, new
signals), and a server or token it does not know is looked up in the store at once.
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import hmac
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import bindparam, delete, select, update
from sqlalchemy.exc import SQLAlchemyError

from undercloud.errors import NotFound
from undercloud.store import Store
from undercloud.store.agent import AgentDeployment, AgentServer
from undercloud.store.group_commit import GroupCommit

SKEW = 10.0  # seconds: signals written this long before the last refresh are read again (clocks, commits)
# seconds: an agent's calls (long-polls, signals) mark its stored last_seen this often; the
# marks are written together, one transaction per heartbeat (`flush_seen`), whatever the fleet
SEEN_WRITE_EVERY = 15.0
REVOKED = "revoked"  # the token hash of a server being deleted: no token hashes to it (not hex)
# A key of the server's document: when a client last asked its agent for a fresh health
# report (`request_health`); the agent's watchdog answers with that value (`answers`).
HEALTH_REQUEST = "health_request"
log = logging.getLogger("undercloud.agents")
_SERVERS, _DEPLOYMENTS = AgentServer.__table__, AgentDeployment.__table__
# Statements built once, their values bound at each call: a fleet's update runs thousands,
# and building one anew (`.values(...)`) costs more than running it.
_INSERT_DEPLOYMENT = _DEPLOYMENTS.insert()
_SET_REVISION = _SERVERS.update().where(_SERVERS.c.id == bindparam("sid")).values(revision=bindparam("rev"))
_SET_SIGNAL = (_DEPLOYMENTS.update().where(_DEPLOYMENTS.c.id == bindparam("did"))
               .values(signal=bindparam("body", type_=_DEPLOYMENTS.c.signal.type), signalled_at=bindparam("at")))


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass
class _Server:
    id: str
    name: str
    token_hash: str
    extra: dict
    revision: float
    deployments: dict[str, dict] = field(default_factory=dict)  # id -> entry
    doc: bytes = b""
    etag: str = ""
    last_modified: str = ""
    last_seen: float | None = None  # this worker's view; the store's is at most SEEN_WRITE_EVERY s older
    seen_stored: float = 0.0

    def rebuild(self) -> None:
        entries = sorted(self.deployments.values(), key=lambda d: (d.get("name") or "", d["id"]))
        self.doc = json.dumps({**self.extra, "deployments": entries}, sort_keys=True).encode()
        self.etag = '"' + hashlib.sha256(self.doc).hexdigest()[:32] + '"'
        self.last_modified = email.utils.formatdate(self.revision, usegmt=True)


class ServerMetadata:
    def __init__(self, store: Store, url: Callable[[], str], ca: Callable[[], str] = lambda: ""):
        """`url`: where agents reach the service (https), `ca`: the CA it is verified with (PEM)."""
        self.store = store
        self._writes = GroupCommit(store.engine)  # deployments published and signals stored
        self._url = url
        self._ca = ca
        self._lock = threading.RLock()  # the maps and their rows; held across store writes
        # the held long-polls alone, never across a store write: the event loop takes it
        self._waiters_lock = threading.Lock()
        self._servers: dict[str, _Server] | None = None
        self._signals: dict[str, dict] = {}  # deployment id -> signal body
        self._owner: dict[str, str] = {}     # deployment id -> server id
        self._owner_of: dict[str, str] = {}  # deployment id -> publishing resource
        self._published: dict[str, set[str]] = {}  # publishing resource -> its deployment ids
        self._waiters: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Future]]] = {}
        self._refreshed = time.time()  # signals from about then on are taken up by `refresh`
        self._seen: dict[str, float] = {}  # server id -> last call, not stored yet
        self._released = False  # the service stops: long-polls are no longer held

    # --- loading -------------------------------------------------------------------
    def _all(self) -> dict[str, _Server]:
        if self._servers is None:
            with self._lock:
                if self._servers is None:
                    servers: dict[str, _Server] = {}
                    with self.store.session() as s:
                        for r in s.scalars(select(AgentServer)):
                            servers[r.id] = _Server(r.id, r.name, r.token_hash, r.extra or {}, r.revision)
                        for d in s.scalars(select(AgentDeployment)):
                            srv = servers.get(d.server_id)
                            if srv is not None:
                                srv.deployments[d.id] = d.document
                                self._owner[d.id] = d.server_id
                                if d.owner:
                                    self._own(d.id, d.owner)
                                if d.signal is not None:
                                    self._signals[d.id] = d.signal
                    for srv in servers.values():
                        srv.rebuild()
                    self._servers = servers
        return self._servers

    def _get(self, server_id: str) -> _Server:
        srv = self._all().get(server_id) or self._reload(server_id)
        if srv is None:
            raise NotFound(f"no agent server {server_id!r}")
        return srv

    def _reload(self, server_id: str) -> _Server | None:
        """The server as the store has it now (another worker may have changed it)."""
        servers = self._all()
        with self._lock:
            with self.store.session() as s:
                row = s.get(AgentServer, server_id)
                deployments = [] if row is None else list(
                    s.scalars(select(AgentDeployment).where(AgentDeployment.server_id == server_id)))
                old = servers.pop(server_id, None)
                for did in list(old.deployments) if old else []:
                    self._drop(did)
                if row is None:
                    return None
                srv = servers[server_id] = _Server(row.id, row.name, row.token_hash, row.extra or {}, row.revision)
                for d in deployments:
                    srv.deployments[d.id] = d.document
                    self._owner[d.id] = server_id
                    if d.owner:
                        self._own(d.id, d.owner)
                    if d.signal is not None:
                        self._signals[d.id] = d.signal
            if old is not None:
                srv.last_seen, srv.seen_stored = old.last_seen, old.seen_stored
            srv.rebuild()
        if old is None or old.etag != srv.etag:
            self._wake(server_id)
        return srv

    def refresh(self) -> int:
        """Take up what other workers wrote since the last call: servers whose revision moved
        (documents, tokens, new and forgotten servers) and agents' signals. Returns how many
        servers changed."""
        if self._servers is None:
            return 0  # not loaded yet: the first use reads it all
        started = time.time()
        since = self._refreshed - SKEW
        with self.store.engine.connect() as conn:
            revisions = dict(conn.execute(select(AgentServer.id, AgentServer.revision)).all())
            signals = conn.execute(select(AgentDeployment.id, AgentDeployment.signal)
                                   .where(AgentDeployment.signalled_at >= since)).all()
        self._refreshed = started
        servers = self._servers
        changed = [i for i, rev in revisions.items() if i not in servers or servers[i].revision != rev]
        changed += [i for i in list(servers) if i not in revisions]
        for server_id in changed:
            self._reload(server_id)
        with self._lock:
            for did, body in signals:
                if did in self._owner and body is not None:
                    self._signals[did] = body
        return len(changed)

    def _bump(self, srv: _Server) -> float:
        srv.revision = max(time.time(), srv.revision + 1.0)  # Last-Modified has 1 s resolution
        return srv.revision

    # --- servers -------------------------------------------------------------------
    def register(self, server_id: str, name: str = "") -> str:
        """Create the server's credentials (or rotate them); returns the new token."""
        from undercloud.tokens import server_token

        token = server_token(self.url().startswith("https://"))  # plain HTTP closes for an https agent
        h = hash_token(token)
        with self._lock:
            servers = self._all()
            now = time.time()
            with self.store.session() as s:
                row = s.get(AgentServer, server_id)
                if row is None:
                    row = AgentServer(id=server_id, name=name, token_hash=h, extra={}, revision=now,
                                      created_at=now)
                    s.add(row)
                else:
                    row.token_hash = h
                    row.name = name or row.name
            srv = servers.get(server_id)
            if srv is None:
                srv = servers[server_id] = _Server(server_id, name, h, {}, now)
                srv.rebuild()
            else:
                srv.token_hash, srv.name = h, name or srv.name
        return token

    def revoke(self, server_id: str) -> None:
        """The server is being deleted: its token is refused from now on, here at once, on
        other workers at their next refresh (one heartbeat: the revision moves). Its
        deployments stay until `forget`, when the server is gone."""
        with self._lock:
            servers = self._all()
            with self.store.session() as s:
                row = s.get(AgentServer, server_id)
                if row is not None:
                    row.token_hash, row.revision = REVOKED, max(time.time(), row.revision + 1.0)
                    revision = row.revision
            srv = servers.get(server_id)
            if srv is not None:
                srv.token_hash = REVOKED
                if row is not None:
                    srv.revision = revision
        self._wake(server_id)

    def forget(self, server_id: str) -> None:
        with self._lock:
            with self.store.session() as s:
                s.execute(delete(AgentDeployment).where(AgentDeployment.server_id == server_id))
                s.execute(delete(AgentServer).where(AgentServer.id == server_id))
            srv = self._all().pop(server_id, None)
            if srv:
                for did in list(srv.deployments):
                    self._drop(did)
        self._wake(server_id)

    def exists(self, server_id: str) -> bool:
        return server_id in self._all()

    def url(self) -> str:
        return self._url()

    def agent_config(self, server_id: str, token: str) -> dict:
        """The agent's configuration file content (see agent/settings.py)."""
        srv = self._get(server_id)
        return {"url": self.url(), "ca": self._ca(), "server_id": server_id, "token": token, "name": srv.name,
                "metadata_url": f"{self.url()}/v1/agent/servers/{server_id}/metadata"}

    def set_extra(self, server_id: str, extra: dict) -> None:
        with self._lock:
            srv = self._get(server_id)
            extra = {k: v for k, v in (extra or {}).items() if k not in ("deployments", HEALTH_REQUEST)}
            if HEALTH_REQUEST in srv.extra:  # a pending request outlives a change of the metadata
                extra[HEALTH_REQUEST] = srv.extra[HEALTH_REQUEST]
            with self.store.session() as s:
                row = s.get(AgentServer, server_id)
                row.extra = extra
                row.revision = self._bump(srv)
            srv.extra = extra
            srv.rebuild()
        self._wake(server_id)

    def servers(self) -> list[dict]:
        with self.store.engine.connect() as conn:  # calls that reached other workers
            stored = dict(conn.execute(select(AgentServer.id, AgentServer.last_seen)).all())
        out = []
        for srv in sorted(self._all().values(), key=lambda x: x.name or x.id):
            done = sum(1 for d in srv.deployments if d in self._signals)
            seen = max((t for t in (srv.last_seen, stored.get(srv.id)) if t is not None), default=None)
            out.append({"id": srv.id, "name": srv.name, "deployments": len(srv.deployments),
                        "signalled": done, "last_seen": seen, "etag": srv.etag})
        return out

    def kube_pods(self, server_id: str) -> list[dict]:
        """The Pods the `kube` deployments published for `server_id` declare (image
        overrides applied), read from the store (whichever worker published them): what a
        container node's podman proxy lets its agent create."""
        from undercloud.agent import pod_spec

        with self.store.engine.connect() as conn:
            docs = conn.execute(select(_DEPLOYMENTS.c.document).where(_DEPLOYMENTS.c.server_id == server_id)).scalars()
            pods = []
            for doc in docs:
                if not isinstance(doc, dict) or doc.get("group") != "kube":
                    continue
                try:  # a copy: split applies the overrides in place
                    pods += pod_spec.split(json.loads(json.dumps(doc.get("config"))), doc.get("options") or {})[1]
                except (ValueError, TypeError, pod_spec.PodError):
                    continue  # its agent refuses it too: nothing of it may be created
        return pods

    def record_health(self, server_id: str, report: dict) -> None:
        """What the server's watchdog last saw of its Pods (agents report on change and every
        minute), stored so that every worker shows it."""
        self._get(server_id)
        with self.store.session() as s:
            row = s.get(AgentServer, server_id)
            if row is not None:
                row.health = {**report, "reported_at": time.time()}

    def health(self, server_id: str) -> dict | None:
        with self.store.session() as s:
            row = s.get(AgentServer, server_id)
            return row.health if row is not None else None

    def healths(self, server_ids: list[str]) -> dict[str, dict | None]:
        """server id -> its last report (None: none yet), in one query; unknown ids are left out."""
        with self.store.engine.connect() as conn:
            return dict(conn.execute(select(AgentServer.id, AgentServer.health)
                                     .where(AgentServer.id.in_(list(server_ids)))).all())

    def request_health(self, server_ids: list[str]) -> float:
        """Ask these servers' agents for a fresh health report; returns the request (a time).
        It goes in their documents (HEALTH_REQUEST), which wakes their long-polls (here at
        once, on other workers at their next refresh); each agent's watchdog then runs its
        readiness probes and reports, answering the request (`answers` in the report). A
        report answering an earlier request than this one is not fresh."""
        with self._lock:
            servers = self._all()
            known = [i for i in dict.fromkeys(server_ids) if i in servers or self._reload(i) is not None]
            asked = max([time.time()] + [float(servers[i].extra.get(HEALTH_REQUEST) or 0) + 0.001 for i in known])
            with self.store.session() as s:
                for sid in known:
                    row, srv = s.get(AgentServer, sid), servers[sid]
                    if row is None:
                        continue
                    srv.extra = {**(row.extra or {}), HEALTH_REQUEST: asked}
                    row.extra, row.revision = srv.extra, self._bump(srv)
            for sid in known:
                servers[sid].rebuild()
        for sid in known:
            self._wake(sid)
        return asked

    # --- deployments ---------------------------------------------------------------
    def put_deployment(self, server_id: str, entry: dict, owner: str | None = None) -> None:
        """Publish a deployment entry on the server. Entries earlier published by the same
        `owner` (on any server) go in the same change, so an agent never sees two revisions.
        Publishing an id that exists already changes nothing (and keeps its signal). Agents
        see it once it is stored."""
        with self._lock:
            srv = self._get(server_id)
            if self._owner.get(entry["id"]) == server_id:
                return
            stale = list(self._published.get(owner, ())) if owner else []
            touched = {server_id} | {self._owner[d] for d in stale if d in self._owner}
            revisions = {sid: self._bump(self._servers[sid]) for sid in touched if sid in self._servers}
            for d in stale:
                self._drop(d)
            srv.deployments[entry["id"]] = entry
            self._owner[entry["id"]] = server_id
            if owner:
                self._own(entry["id"], owner)

            # plain statements, no row loaded: a fleet's update publishes thousands of these
            # at once, and loading a server row decrypts its extra and health
            def write(conn) -> None:
                if stale:
                    conn.execute(_DEPLOYMENTS.delete().where(_DEPLOYMENTS.c.id.in_(stale)))
                conn.execute(_INSERT_DEPLOYMENT, {"id": entry["id"], "server_id": server_id,
                                                  "name": entry.get("name") or "", "owner": owner,
                                                  "document": entry, "created_at": time.time()})
                if revisions:
                    conn.execute(_SET_REVISION, [{"sid": sid, "rev": rev} for sid, rev in revisions.items()])
            pending = self._writes.submit(write)
        self._committed(pending, touched)

    def _committed(self, pending, touched: set[str]) -> None:
        """Wait for a change's write; then its servers' documents are rebuilt and their
        long-polls woken, or, refused by the store, the servers are read back from it."""
        try:
            self._writes.wait(pending)
        except Exception:
            for sid in touched:
                self._reload(sid)
            raise
        with self._lock:
            for sid in touched:
                if sid in self._servers:
                    self._servers[sid].rebuild()
        for sid in touched:
            self._wake(sid)

    def _own(self, deployment_id: str, owner: str) -> None:
        self._owner_of[deployment_id] = owner
        self._published.setdefault(owner, set()).add(deployment_id)

    def _drop(self, deployment_id: str) -> None:
        sid = self._owner.pop(deployment_id, None)
        owner = self._owner_of.pop(deployment_id, None)
        if owner is not None:
            ids = self._published.get(owner)
            if ids is not None:
                ids.discard(deployment_id)
                if not ids:
                    del self._published[owner]
        self._signals.pop(deployment_id, None)
        if sid and sid in self._servers:
            self._servers[sid].deployments.pop(deployment_id, None)

    def remove_deployment(self, deployment_id: str) -> None:
        self._remove([deployment_id])

    def remove_owner(self, owner: str) -> None:
        """Remove every deployment `owner` published (a deleted deployment resource)."""
        self._all()
        self._remove(list(self._published.get(owner, ())))

    def _remove(self, ids: list[str]) -> None:
        with self._lock:
            self._all()
            ids = [d for d in ids if d in self._owner]
            if not ids:
                return
            touched = {self._owner[d] for d in ids}
            with self.store.session() as s:
                s.execute(delete(AgentDeployment).where(AgentDeployment.id.in_(ids)))
                for sid in touched:
                    row = s.get(AgentServer, sid)
                    if row is not None and sid in self._servers:
                        row.revision = self._bump(self._servers[sid])
            for d in ids:
                self._drop(d)
            for sid in touched:
                if sid in self._servers:
                    self._servers[sid].rebuild()
        for sid in touched:
            self._wake(sid)

    def signal_of(self, deployment_id: str) -> dict | None:
        self._all()
        return self._signals.get(deployment_id)

    def deployment_server(self, deployment_id: str) -> str | None:
        self._all()
        return self._owner.get(deployment_id)

    # --- what agents call (api/agent.py) -------------------------------------------
    def authenticate(self, server_id: str, token: str | None) -> _Server | None:
        if not token:
            return None
        srv = self._all().get(server_id)
        if srv is None or not hmac.compare_digest(srv.token_hash, hash_token(token)):
            # registered, or its token rotated, by another worker since: ask the store once
            stored = self._stored_hash(server_id)
            if stored is None or stored == (srv.token_hash if srv else None):
                return None
            srv = self._reload(server_id)
            if srv is None or not hmac.compare_digest(srv.token_hash, hash_token(token)):
                return None
        srv.last_seen = now = time.time()
        if now - srv.seen_stored >= SEEN_WRITE_EVERY:
            srv.seen_stored = now
            self._seen[server_id] = now
        return srv

    def flush_seen(self) -> int:
        """Store the agents' last calls marked since the last flush, in one transaction;
        returns how many. A store that refuses keeps them for the next flush."""
        with self._lock:
            seen, self._seen = self._seen, {}
        if not seen:
            return 0
        try:
            with self.store.engine.begin() as conn:
                conn.execute(update(AgentServer).where(AgentServer.id == bindparam("sid"))
                             .values(last_seen=bindparam("at")), [{"sid": k, "at": v} for k, v in seen.items()])
        except SQLAlchemyError as exc:
            with self._lock:
                for k, v in seen.items():
                    self._seen[k] = max(v, self._seen.get(k, 0.0))
            log.warning("cannot store when %d agent(s) were last seen: %s", len(seen), type(exc).__name__)
            return 0
        return len(seen)

    def _stored_hash(self, server_id: str) -> str | None:
        with self.store.engine.connect() as conn:
            return conn.execute(select(AgentServer.token_hash).where(AgentServer.id == server_id)).scalar()

    def record_signal(self, server_id: str, deployment_id: str, body: dict) -> None:
        """Store the agent's signal; raises NotFound for a deployment that is not this server's."""
        if self._owner.get(deployment_id) != server_id:
            self._reload(server_id)  # published by another worker since this one's last refresh
        with self._lock:
            if self._owner.get(deployment_id) != server_id:
                raise NotFound(f"no deployment {deployment_id!r} on this server")
            # an UPDATE (loading the row would decrypt its document), committed with others
            pending = self._writes.submit(lambda conn: conn.execute(
                _SET_SIGNAL, {"did": deployment_id, "body": body, "at": time.time()}).rowcount)
        if self._writes.wait(pending) == 0:
            raise NotFound(f"no deployment {deployment_id!r} on this server")
        with self._lock:
            self._signals[deployment_id] = body

    async def wait_change(self, server_id: str, etag: str, timeout: float,
                          gone: asyncio.Future | None = None) -> None:
        """Return when the server's document no longer has `etag`, after `timeout`, when
        `gone` is done (the client left) or the service stops (`release`). No thread and no
        store connection is held: a future on the event loop, set by `_wake` from wherever
        the document changed (engine threads included), or by `refresh` for other workers'
        changes."""
        srv = self._all().get(server_id)
        if srv is None or srv.etag != etag or self._released:
            return
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        with self._waiters_lock:
            self._waiters.setdefault(server_id, []).append((loop, fut))
            if srv.etag != etag:  # changed while registering
                fut.set_result(None)
        try:
            if gone is None:
                await asyncio.wait_for(fut, timeout)
            else:
                await asyncio.wait((fut, gone), timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        except TimeoutError:
            pass
        finally:
            with self._waiters_lock:
                lst = self._waiters.get(server_id, [])
                if (loop, fut) in lst:
                    lst.remove((loop, fut))
                if not lst:
                    self._waiters.pop(server_id, None)

    def waiting(self) -> int:
        """How many long-polls are held now."""
        with self._waiters_lock:
            return sum(len(v) for v in self._waiters.values())

    def release(self) -> None:
        """The service stops: every held long-poll answers now (its agent asks again, of
        another worker or of the restarted service) instead of holding the stop for its wait."""
        self._released = True
        with self._waiters_lock:
            ids = list(self._waiters)
        for server_id in ids:
            self._wake(server_id)

    def _wake(self, server_id: str) -> None:
        with self._waiters_lock:
            waiters = list(self._waiters.get(server_id, []))
        for loop, fut in waiters:
            def _set(f=fut):
                if not f.done():
                    f.set_result(None)
            try:
                loop.call_soon_threadsafe(_set)
            except RuntimeError:  # loop closed
                pass
