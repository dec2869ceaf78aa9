"""Agent logging with secrets masked: the token, inputs marked secret or hidden, and
any input named like a password, token, secret or key."""

from __future__ import annotations

import re
import sys
import time

SECRET_NAME = re.compile(r"pass|token|secret|key|credential|auth", re.I)
MASK = "***"


class Log:
    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.secrets: set[str] = set()

    def secret(self, value: object) -> None:
        text = value if isinstance(value, str) else None
        if text and len(text) >= 4:
            self.secrets.add(text)

    def secret_inputs(self, inputs: list) -> None:
        for i in inputs or []:
            if not isinstance(i, dict):
                continue
            if i.get("secret") or i.get("hidden") or SECRET_NAME.search(str(i.get("name", ""))):
                v = i.get("value")
                self.secret(v if isinstance(v, str) else None if v is None else str(v))

    def mask(self, text: str) -> str:
        for s in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(s, MASK)
        return text

    def __call__(self, message: str) -> None:
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} undercloud-agent: {self.mask(message)}\n"
        try:
            self.stream.write(line)
            self.stream.flush()
        except (OSError, ValueError):
            pass
