"""Errors a user can cause. Each renders as one line: `where: message`."""

from __future__ import annotations


class UndercloudError(Exception):
    """A user-facing error: shown as one line, never as a traceback."""

    exit_code = 1

    def __init__(self, message: str, where: str | None = None):
        super().__init__(message)
        self.message = message
        self.where = where

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


class NotFound(UndercloudError):
    pass


class Conflict(UndercloudError):
    pass


class InvalidInput(UndercloudError):
    pass


class ServiceUnavailable(UndercloudError):
    pass
