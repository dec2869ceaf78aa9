"""Errors a user can cause. Each renders as one line: `where: message`."""

from __future__ import annotations

import logging


class UndercloudError(Exception):
    """A user-facing error: shown as one line, never as a traceback.

    `status`: what the API answers for it (api/app.py); a subclass sets its own, or
    inherits its base's. The clients map a status back with `by_status`."""

    exit_code = 1
    status = 400

    def __init__(self, message: str, where: str | None = None):
        super().__init__(message)
        self.message = message
        self.where = where

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


class NotFound(UndercloudError):
    status = 404


class Conflict(UndercloudError):
    status = 409


class InvalidInput(UndercloudError):
    status = 400


class ServiceUnavailable(UndercloudError):
    status = 503


class Elsewhere(ServiceUnavailable):
    """What was asked must run on another live worker (`worker`, its id): the API forwards it there."""

    def __init__(self, message: str, worker: str, where: str | None = None):
        super().__init__(message, where)
        self.worker = worker


class NeedsFirstBoot(Conflict):
    """A resumed server create must be given its first-boot data again (a new token): the
    data was lost before it was written (the API answers 428)."""

    status = 428


class Unauthorized(UndercloudError):
    """A missing or wrong credential (the API answers 401)."""

    status = 401


class InternalError(UndercloudError):
    """Something unexpected (a bug): shown as "internal error <id>", details only in the log."""

    status = 500


def by_status(*classes: type[UndercloudError]) -> dict[int, type[UndercloudError]]:
    """Status -> error class, for a client turning an answer back into the error: `classes`
    are the ones it tells apart (one per status)."""
    out = {c.status: c for c in classes}
    if len(out) != len(classes):
        raise ValueError(f"two of {[c.__name__ for c in classes]} have one status")
    return out


def internal_error(exc: BaseException, log: logging.Logger | None = None, what: str = "") -> InternalError:
    """Log `exc` under a new id and return the error to show in its place.

    Neither the log nor the answer carries the exception's message: it may hold values
    (SQL parameters, resolved template values, hidden parameters). The log gets the
    exception types and where they were raised, which is what finding the bug needs."""
    import secrets  # here, not at the top: every CLI command imports this module
    import traceback

    ident = secrets.token_hex(4)
    lines = []
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:  # the chain, innermost cause last
        seen.add(id(e))
        frames = traceback.extract_tb(e.__traceback__)
        lines.append(f"  {type(e).__module__}.{type(e).__qualname__}, raised at:")
        lines += [f"    {f.filename}:{f.lineno} in {f.name}" for f in frames[-12:]]
        e = e.__cause__ or (None if e.__suppress_context__ else e.__context__)
    (log or logging.getLogger("undercloud")).error("internal error %s%s\n%s", ident,
                                                   f" ({what})" if what else "", "\n".join(lines))
    return InternalError(f"internal error {ident}")
