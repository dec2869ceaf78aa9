"""Regular expressions from templates (allowed_pattern, yaql's regex functions) that cannot
freeze the service: Python's re backtracks, exponentially on nested repetition such as
(a+)+, and holds the interpreter (every thread) while it does."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from typing import Any

PATTERN_SECONDS = 2.0
_MATCH = ("import json, re, sys\np, t = json.load(sys.stdin)\nm = re.match(p, t)\n"
          "print(1 if m is not None and m.end() == len(t) else 0)")


@functools.lru_cache(maxsize=256)
def backtracks(pattern: str) -> bool:
    """True for nested repetition ((a+)+, (a|aa)*): Python's re may then take exponential time,
    holding the interpreter (every thread of the service) while it does."""
    try:
        from re import _constants as c
        from re import _parser
    except ImportError:  # another Python: treat every pattern as one that may backtrack
        return True
    try:
        tree = _parser.parse(pattern)
    except Exception:  # noqa: BLE001 - invalid: re.compile says why
        return False
    repeats = {c.MAX_REPEAT, c.MIN_REPEAT} | ({c.POSSESSIVE_REPEAT} if hasattr(c, "POSSESSIVE_REPEAT") else set())

    def walk(items: Any, inside: bool) -> bool:
        for op, av in items:
            if op in repeats:
                many = av[1] > 1
                if many and inside or walk(av[2], inside or many):
                    return True
            elif op is c.BRANCH:
                if inside or any(walk(b, inside) for b in av[1]):
                    return True
            elif op is c.SUBPATTERN:
                if walk(av[-1], inside):
                    return True
            elif op in (c.ASSERT, c.ASSERT_NOT):
                if walk(av[1], inside):
                    return True
        return False

    return walk(tree.data, False)


def refuse_backtracking(pattern: Any) -> None:
    if isinstance(pattern, str) and backtracks(pattern):
        raise ValueError(f"the pattern {pattern!r} repeats a repetition or an alternation (like (a+)+ or "
                         "(a|aa)*), which can take exponential time; not allowed here")


class GuardedRe:
    """`re` for yaql's regex functions (regex(), matches, =~): the same, but patterns that
    backtrack without bound are refused."""

    def __getattr__(self, name: str) -> Any:
        return getattr(re, name)

    def compile(self, pattern: Any, flags: int = 0) -> Any:
        refuse_backtracking(pattern)
        return re.compile(pattern, flags)

    def search(self, pattern: Any, string: Any, flags: int = 0) -> Any:
        refuse_backtracking(pattern)
        return re.search(pattern, string, flags)


def pattern_matches(pattern: str, text: str) -> bool:
    """allowed_pattern: the whole text matches. A pattern that can backtrack without bound is
    matched in a child process with a time limit, so it can never freeze the service."""
    if not backtracks(pattern):
        m = re.match(pattern, text)
        return m is not None and m.end() == len(text)
    try:
        r = subprocess.run([sys.executable, "-I", "-c", _MATCH], input=json.dumps([pattern, text]).encode(),
                           capture_output=True, timeout=PATTERN_SECONDS)
    except subprocess.TimeoutExpired:
        raise ValueError(f'matching the pattern "{pattern}" took more than {PATTERN_SECONDS:.0f} s '
                         "(nested repetition such as (a+)+ backtracks without bound)") from None
    return r.stdout.strip() == b"1"
