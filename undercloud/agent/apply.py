"""os-apply-config: render a template tree mirroring `/` from merged metadata.

Semantics kept from os-apply-config: every file under the templates root is a mustache
template (or, when executable, a program reading the metadata as JSON on stdin and
printing the file); `NAME.oac` beside it controls `owner`, `group`, `mode` and
`allow_empty` (an empty result then deletes the file); metadata sources are deep-merged
in order, later sources winning. Files are replaced atomically.
"""

from __future__ import annotations

import copy
import grp
import json
import os
import pwd
import subprocess
from pathlib import Path
from typing import Any

from undercloud.agent.files import write_atomic
from undercloud.agent.mustache import MustacheError, render

CONTROL_SUFFIX = ".oac"


class ApplyError(Exception):
    pass


def deep_merge(a: Any, b: Any) -> Any:
    if not isinstance(b, dict) or not isinstance(a, dict):
        return copy.deepcopy(b)
    out = copy.deepcopy(a)
    for k, v in b.items():
        out[k] = deep_merge(out[k], v) if isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def merge_sources(sources: list[dict]) -> dict:
    merged: dict = {}
    for s in sources:
        if isinstance(s, dict) and s:
            merged = deep_merge(merged, s)
    return merged


def _scalar(text: str) -> Any:
    """One YAML scalar as .oac files use them: 0644 (octal), 420, true/false, 'text'."""
    t = text.strip()
    if t[:1] in "'\"" and t[-1:] == t[:1]:
        return t[1:-1]
    if t.lower() in ("true", "false"):
        return t.lower() == "true"
    if t.isdigit():
        if len(t) > 1 and t.startswith("0"):  # YAML 1.1: 0644 is octal, 0999 a string
            return int(t, 8) if set(t) <= set("01234567") else t
        return int(t)
    if t.lower().startswith("0o") and t[2:].isdigit():
        return int(t[2:], 8)
    return t


def parse_control(path: Path) -> dict:
    """A .oac file: JSON, or the `key: value` YAML subset os-apply-config's users write."""
    text = path.read_text()
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        data = {}
        for n, line in enumerate(text.splitlines(), 1):
            line = line.split("#", 1)[0].rstrip()
            if not line.strip() or line.strip() == "---":
                continue
            if ":" not in line:
                raise ApplyError(f"{path}:{n}: expected 'key: value'") from None
            k, v = line.split(":", 1)
            data[k.strip()] = _scalar(v)
    if not isinstance(data, dict):
        raise ApplyError(f"{path}: header is not a dict")
    unknown = set(data) - {"owner", "group", "mode", "allow_empty"}
    if unknown:
        raise ApplyError(f"{path}: unrecognised file control key {sorted(unknown)[0]!r}")
    mode = data.get("mode")
    if mode is not None and (not isinstance(mode, int) or isinstance(mode, bool) or not 0 <= mode <= 0o777):
        raise ApplyError(f"{path}: mode {mode!r} is not a number between 0 and 0777")
    if "allow_empty" in data and not isinstance(data["allow_empty"], bool):
        raise ApplyError(f"{path}: allow_empty requires a boolean")
    # Resolve owner/group now, so an unknown name fails before any file is written.
    if data.get("owner") is not None:
        data["owner"] = _uid(data["owner"], path)
    if data.get("group") is not None:
        data["group"] = _gid(data["group"], path)
    return data


def _uid(v: Any, path: Path) -> int:
    try:
        return pwd.getpwuid(v).pw_uid if isinstance(v, int) else pwd.getpwnam(str(v)).pw_uid
    except KeyError:
        raise ApplyError(f"{path}: owner {v!r} not found in passwd database") from None


def _gid(v: Any, path: Path) -> int:
    try:
        return grp.getgrgid(v).gr_gid if isinstance(v, int) else grp.getgrnam(str(v)).gr_gid
    except KeyError:
        raise ApplyError(f"{path}: group {v!r} not found in group database") from None


def render_tree(templates: Path, config: dict) -> dict[str, tuple[str, dict]]:
    """{relative output path: (body, control)}; renders everything before writing anything."""
    out: dict[str, tuple[str, dict]] = {}
    if not templates.is_dir():
        return out
    for root, _dirs, files in os.walk(templates):
        for f in sorted(files):
            if f.endswith(CONTROL_SUFFIX):
                continue
            src = Path(root) / f
            rel = str(src.relative_to(templates))
            ctrl_path = src.with_name(f + CONTROL_SUFFIX)
            ctrl = parse_control(ctrl_path) if ctrl_path.is_file() else {}
            if os.access(src, os.X_OK):
                p = subprocess.run([str(src)], input=json.dumps(config), capture_output=True, text=True)
                if p.returncode != 0:
                    raise ApplyError(f"{src}: config script failed ({p.returncode}): {p.stderr.strip()[-500:]}")
                body = p.stdout
            else:
                try:
                    body = render(src.read_text(), config)
                except MustacheError as exc:
                    raise ApplyError(f"{src}: {exc}") from None
            out[rel] = (body, ctrl)
    return out


def write_tree(tree: dict[str, tuple[str, dict]], output: Path) -> list[str]:
    """Write the rendered files under `output`; returns the paths written or deleted."""
    changed = []
    for rel, (body, ctrl) in sorted(tree.items()):
        path = output / rel
        if not ctrl.get("allow_empty", True) and body == "":
            if path.exists():
                path.unlink()
                changed.append(str(path))
            continue
        if path.exists():
            st = path.stat()
            mode, uid, gid = st.st_mode & 0o7777, st.st_uid, st.st_gid
        else:
            mode, uid, gid = 0o644, -1, -1
        mode = ctrl["mode"] if ctrl.get("mode") is not None else mode
        if ctrl.get("owner") is not None:
            uid = ctrl["owner"]
        if ctrl.get("group") is not None:
            gid = ctrl["group"]
        write_atomic(path, body, mode, owner=(uid, gid))
        changed.append(str(path))
    return changed


def apply_config(templates: Path, output: Path, config: dict) -> list[str]:
    return write_tree(render_tree(templates, config), output)
