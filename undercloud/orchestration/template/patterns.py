"""Regular expressions from templates (allowed_pattern, yaql's regex functions) that cannot
freeze the service. Python's re backtracks (exponentially on nested repetition such as
(a+)+, polynomially on `\\s*\\s*\\s*x`) and holds the interpreter, every thread, while it does.

`allowed_pattern` keeps Heat's meaning exactly (Python's `re.match`, the match found ending
at the end of the value) but runs on RE2, which takes linear time and lets go of the
interpreter: the pattern is rewritten from Python's own parse of it, each character class as
the exact set of the value's characters Python's re would match there (so `\\d`, `\\w`, `\\s`,
case folding and Unicode are Python's), anchors and repetition as RE2 has them with the same
leftmost-first preference. What RE2 cannot express (lookarounds, backreferences, possessive
repetition, `$` before an inner newline...) is matched by Python's re in a child process
under the `pattern_ms` limit; a match over it refuses the value.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from typing import Any

from undercloud.orchestration.limits import LIMITS, exceeded

try:
    from re import _compiler as _sre_compile
    from re import _constants as _c
    from re import _parser as _sre_parse
except ImportError:  # another Python: every pattern goes to the child process
    _sre_parse = None  # type: ignore[assignment]


@functools.cache
def _re2() -> Any:
    """google-re2, imported on first use (20 ms: the CLI's template commands pay it only for
    a pattern); None when it is not installed (every pattern then goes to the child)."""
    try:
        import re2
    except ImportError:
        return None
    return re2


_MATCH = ("import json, re, sys\np, t = json.load(sys.stdin)\nm = re.match(p, t)\n"
          "print(1 if m is not None and m.end() == len(t) else 0)")
_ASCII = "".join(map(chr, range(128)))
_MAX_ALPHABET = 1000  # distinct non-ASCII characters of a value RE2 is given classes for
_RE2_COUNT = 1000  # RE2's largest repetition count
_PROBES = 2_000_000  # characters a rewrite may try against character classes (about a second)
_RE2_TEXT = 256 * 1024  # characters of a rewritten pattern: RE2 compiles 256 KiB in 50-70 ms


@functools.lru_cache(maxsize=256)
def backtracks(pattern: str) -> bool:
    """True for nested repetition ((a+)+, (a|aa)*) or unbounded repetitions one after the
    other (\\s*\\s*x): Python's re may then take exponential or polynomial time, holding the
    interpreter (every thread of the service) while it does. (yaql's regex functions refuse
    these; they need Python's re objects.)"""
    if _sre_parse is None:
        return True
    try:
        tree = _sre_parse.parse(pattern)
    except Exception:  # noqa: BLE001 - invalid: re.compile says why
        return False
    repeats = {_c.MAX_REPEAT, _c.MIN_REPEAT} | ({_c.POSSESSIVE_REPEAT} if hasattr(_c, "POSSESSIVE_REPEAT") else set())

    def inline(items: Any) -> list:  # groups do not change what matches: their items in place
        out: list = []
        for op, av in items:
            out.extend(inline(av[-1]) if op is _c.SUBPATTERN else [(op, av)])
        return out

    def walk(items: Any, inside: bool) -> bool:
        open_repeat = False  # after an unbounded repetition, with only optional items since
        for op, av in inline(items):
            if op in repeats:
                many = av[1] > 1
                if many and inside or walk(av[2], inside or many):
                    return True
                if av[1] == _c.MAXREPEAT:
                    if open_repeat:
                        return True
                    open_repeat = True
                elif av[0] > 0:
                    open_repeat = False
            elif op is _c.BRANCH:
                if inside or any(walk(b, inside) for b in av[1]):
                    return True
                open_repeat = False
            elif op in (_c.ASSERT, _c.ASSERT_NOT):
                if walk(av[1], inside):
                    return True
            elif op is not _c.AT:
                open_repeat = False
        return False

    return walk(tree.data, False)


def refuse_backtracking(pattern: Any) -> None:
    if isinstance(pattern, str) and backtracks(pattern):
        raise ValueError(f"the pattern {pattern!r} repeats a repetition or an alternation (like (a+)+ or "
                         "(a|aa)*), or has repetitions one after the other (like \\s*\\s*), which can take "
                         "exponential or polynomial time; not allowed here")


class GuardedRe:
    """`re` for yaql's regex functions. `regex()` must give Python's re objects (yaql checks
    their type and calls their methods): patterns that backtrack without bound are refused.
    The yes/no forms with a pattern as text (`=~`, `!~`, `"...".matches("...")`) only ask
    whether re.search finds a match: answered by RE2 when it can say the same."""

    def __getattr__(self, name: str) -> Any:
        return getattr(re, name)

    def compile(self, pattern: Any, flags: int = 0) -> Any:
        refuse_backtracking(pattern)
        return re.compile(pattern, flags)

    def search(self, pattern: Any, string: Any, flags: int = 0) -> Any:
        if isinstance(pattern, str) and isinstance(string, str) and not flags:
            plan = _plan(pattern, string)
            if plan is not None:
                return plan.search(string)  # only tested against None by yaql
        refuse_backtracking(pattern)
        return re.search(pattern, string, flags)


# ------------------------------------------------------------------------ allowed_pattern


class _Unsupported(Exception):
    """Something of the pattern RE2 does not have, or not with Python's meaning."""


class _Rewrite:
    """A Python pattern in RE2's syntax, for values made of `alphabet`'s characters (ASCII
    and the value's others); `dollar` and `non_boundary` say what else a value must be (no
    newline but a last one; not empty) for it to mean what the pattern means."""

    def __init__(self, pattern: str, alphabet: str):
        self.alphabet = alphabet
        self.dollar = False  # `$` (not multiline) is written (?m:$): right unless a newline is inside
        self.non_boundary = False  # Python's \B never matches an empty text; RE2's does
        self.classes: dict[str, str] = {}  # the same class again costs nothing
        self.budget = _PROBES  # characters tried against classes: a huge pattern over a big alphabet
        self.size = 0  # characters of classes written: RE2 compiles holding the interpreter
        tree = _sre_parse.parse(pattern)
        self.text = self.seq(tree.data, tree.state.flags)

    def seq(self, items: Any, flags: int) -> str:
        return "".join(self.item(op, av, flags) for op, av in items)

    def item(self, op: Any, av: Any, flags: int) -> str:
        if op in (_c.LITERAL, _c.NOT_LITERAL, _c.ANY, _c.IN):
            return self.chars(op, av, flags)
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT):
            lo, hi, body = av
            if lo > _RE2_COUNT or (hi != _c.MAXREPEAT and hi > _RE2_COUNT):
                raise _Unsupported
            if hi > 1 and _empty(body):  # Python and RE2 end a loop of empty iterations differently
                raise _Unsupported
            n = f"{{{lo},}}" if hi == _c.MAXREPEAT else f"{{{lo},{hi}}}"
            return f"(?:{self.seq(body, flags)}){n}{'?' if op is _c.MIN_REPEAT else ''}"
        if op is _c.SUBPATTERN:
            _group, add, remove, body = av
            if add & _sre_parse.TYPE_FLAGS:
                flags &= ~_sre_parse.TYPE_FLAGS
            return f"(?:{self.seq(body, (flags | add) & ~remove)})"
        if op is _c.BRANCH:
            return "(?:" + "|".join(self.seq(b, flags) for b in av[1]) + ")"
        if op is _c.AT:
            return self.at(av, flags)
        raise _Unsupported  # lookarounds, backreferences, conditionals, atomic groups...

    def at(self, av: Any, flags: int) -> str:
        multiline = flags & _c.SRE_FLAG_MULTILINE
        if av is _c.AT_BEGINNING:
            return "(?m:^)" if multiline else r"\A"
        if av is _c.AT_BEGINNING_STRING:
            return r"\A"
        if av is _c.AT_END:
            self.dollar = self.dollar or not multiline
            return "(?m:$)"
        if av is _c.AT_END_STRING:
            return r"\z"
        if av in (_c.AT_BOUNDARY, _c.AT_NON_BOUNDARY):
            # RE2's word characters are ASCII's: the same unless the value has others
            if any(_word(c, flags) for c in self.alphabet if ord(c) > 127):
                raise _Unsupported
            self.non_boundary = self.non_boundary or av is _c.AT_NON_BOUNDARY
            return r"\b" if av is _c.AT_BOUNDARY else r"\B"
        raise _Unsupported

    def chars(self, op: Any, av: Any, flags: int) -> str:
        """One character: the class of the alphabet's characters Python's re matches here."""
        key = repr((op, av, flags))
        out = self.classes.get(key)
        if out is None:
            self.budget -= len(self.alphabet)
            if self.budget < 0:
                raise _Unsupported  # the child process decides, under its time limit
            self.classes[key] = out = self._chars(op, av, flags)
        self.size += len(out)
        if self.size > _RE2_TEXT:
            raise _Unsupported
        return out

    def _chars(self, op: Any, av: Any, flags: int) -> str:
        state = _sre_parse.State()
        state.flags = flags
        one = _sre_compile.compile(_sre_parse.SubPattern(state, [(op, av)]), 0)
        points = [ord(m.group()) for m in one.finditer(self.alphabet)]
        if not points:
            return r"[^\x00-\x{10ffff}]"
        ranges = []
        start = prev = points[0]
        for p in points[1:]:
            if p != prev + 1:
                ranges.append((start, prev))
                start = p
            prev = p
        ranges.append((start, prev))
        return "[" + "".join(_char(a) if a == b else f"{_char(a)}-{_char(b)}" for a, b in ranges) + "]"


def _char(point: int) -> str:
    """A character in an RE2 class: ASCII letters and digits as themselves, others escaped."""
    c = chr(point)
    return c if c.isascii() and c.isalnum() else f"\\x{{{point:x}}}"


def _empty(items: Any) -> bool:
    """Whether a parsed sequence can match the empty string."""
    for op, av in items:
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT):
            if av[0] > 0 and not _empty(av[2]):
                return False
        elif op is _c.SUBPATTERN:
            if not _empty(av[-1]):
                return False
        elif op is _c.BRANCH:
            if not any(_empty(b) for b in av[1]):
                return False
        elif op is not _c.AT:
            return False
    return True


def _word(c: str, flags: int) -> bool:
    return not flags & _c.SRE_FLAG_ASCII and (c.isalnum() or c == "_")


@functools.lru_cache(maxsize=128)  # each RE2 object may grow to its max_mem (8 MiB) of DFA states
def _rewrite(pattern: str, others: str) -> tuple[Any, bool, bool] | None:
    """(RE2 regexp, whether it has a non-multiline `$`, whether it has \\B), or None when
    RE2 cannot match `pattern` as Python would for values of ASCII and `others`."""
    re2 = _re2()
    if re2 is None or _sre_parse is None:
        return None
    try:
        r = _Rewrite(pattern, _ASCII + others)
        if len(r.text) > _RE2_TEXT:
            return None
        options = re2.Options()
        options.log_errors = False  # a program past max_mem (8 MiB) is re2.error: the child decides
        return re2.compile(r.text, options), r.dollar, r.non_boundary
    except (_Unsupported, re2.error, re.error, RecursionError, OverflowError):
        return None


_RESULTS: dict[tuple[str, str], bool] = {}  # the child process's answers for short values


def _plan(pattern: str, text: str) -> Any:
    """The RE2 regexp that means what `pattern` means in Python's re for `text`, or None."""
    others = "".join(sorted({c for c in text if ord(c) > 127})) if not text.isascii() else ""
    if len(others) > _MAX_ALPHABET or any("\ud800" <= c <= "\udfff" for c in others):
        return None
    plan = _rewrite(pattern, others)
    if plan is None:
        return None
    regexp, dollar, non_boundary = plan
    if (dollar and "\n" in text[:-1]) or (non_boundary and not text):
        return None
    return regexp


def pattern_matches(pattern: str, text: str) -> bool:
    """allowed_pattern as Heat has it: `re.match` finds a match that ends at the end of the
    text. On RE2 when it can say the same, else in a child process under the time limit."""
    regexp = _plan(pattern, text)
    if regexp is None:
        return _in_child(pattern, text)
    m = regexp.match(text)
    return m is not None and m.end() == len(text)


def _in_child(pattern: str, text: str) -> bool:
    key = (pattern, text)
    if key in _RESULTS:
        return _RESULTS[key]
    limit = LIMITS.pattern_ms
    try:
        r = subprocess.run([sys.executable, "-I", "-c", _MATCH], input=json.dumps([pattern, text]).encode(),
                           capture_output=True, timeout=limit / 1000)
    except subprocess.TimeoutExpired:
        shown = pattern if len(pattern) <= 100 else pattern[:99] + "…"
        raise ValueError(exceeded("pattern_ms", f'the time in milliseconds to match the pattern "{shown}" '
                                  "(in Python's re: RE2 cannot run it)")) from None
    if r.returncode != 0:  # a pattern re.compile refused is reported where it is parsed
        raise ValueError(f'the pattern "{pattern[:100]}" could not be matched')
    ok = r.stdout.strip() == b"1"
    if len(pattern) + len(text) <= 2000:
        if len(_RESULTS) >= 4096:
            _RESULTS.clear()
        _RESULTS[key] = ok
    return ok
