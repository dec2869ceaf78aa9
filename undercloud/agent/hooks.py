"""Hooks, chosen by a software config's `group`, with Heat's heat-config contract:
the deployment (id, name, group, config, inputs, outputs, options) as JSON on stdin, a
JSON object on stdout with deploy_stdout, deploy_stderr, deploy_status_code and the
declared outputs.

An executable `<hooks_dir>/<group>` wins (heat-config's layout, so existing hooks plug
in); otherwise a built-in hook runs as `python3 -m undercloud.agent hook GROUP`. Every
hook runs in its own process group with a timeout, so a hook that is missing, crashes
or hangs still ends in a result that says why.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from undercloud.agent import apply as oac
from undercloud.agent import files
from undercloud.agent.settings import state_base

BUILTIN = ("script", "apply-config", "json-file", "kube")
# os-apply-config style deployments: their config is merged into the metadata and
# applied by the agent's apply step, as os-collect-config's merger does.
APPLY_GROUPS = ("os-apply-config", "Heat::Ungrouped")

MISSING_HOOK = 127
TIMED_OUT = 124


def failure(code: int, reason: str, stdout: str = "", stderr: str = "") -> dict:
    stderr = (stderr + ("\n" if stderr and not stderr.endswith("\n") else "")) + f"undercloud-agent: {reason}"
    return {"deploy_stdout": stdout, "deploy_stderr": stderr, "deploy_status_code": code,
            "deploy_failure_reason": reason}


def command_for(group: str, hooks_dir: Path | None) -> list[str] | None:
    if hooks_dir is not None:
        path = hooks_dir / group
        if path.is_file() and os.access(path, os.X_OK):
            return [str(path)]
    if group in BUILTIN:
        return [sys.executable, "-m", "undercloud.agent", "hook", group]
    return None


def _text(b: bytes | None) -> str:
    return (b or b"").decode("utf-8", "replace")


def run(deployment: dict, hooks_dir: Path | None, timeout: float, env: dict | None = None,
        started=lambda pid: None) -> dict:
    """Run the deployment's hook; always returns a response (never raises for hook faults).
    `started(pid)` is told the hook's process (group) id, for the journal."""
    group = deployment.get("group") or "Heat::Ungrouped"
    cmd = command_for(group, hooks_dir)
    if cmd is None:
        where = f"{hooks_dir}/{group}" if hooks_dir else "the hooks directory"
        return failure(MISSING_HOOK, f"no hook for group {group!r} (not built in: {', '.join(BUILTIN)}; "
                                     f"no executable {where})")
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=env, start_new_session=True)
    except OSError as exc:
        return failure(MISSING_HOOK, f"cannot start hook {cmd[0]}: {exc.strerror}")
    started(proc.pid)
    try:
        out, err = proc.communicate(json.dumps(deployment).encode(), timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        return failure(TIMED_OUT, f"hook {group!r} ran past its timeout of {timeout:g} s and was killed",
                       _text(out), _text(err))
    finally:
        _kill_group(proc)  # whatever the hook left behind in its group
    try:
        response = json.loads(out or b"")
        if not isinstance(response, dict):
            raise ValueError("not an object")
    except ValueError:
        code = proc.returncode or 1
        tail = _text(err).strip().splitlines()[-1:] or ["no output"]
        return failure(code, f"hook {group!r} crashed (exit {proc.returncode}): {tail[0][:300]}",
                       _text(out), _text(err))
    response.setdefault("deploy_stdout", "")
    response.setdefault("deploy_stderr", "")
    response.setdefault("deploy_status_code", proc.returncode)
    return response


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# --- built-in hooks (run in the hook process: `python3 -m undercloud.agent hook GROUP`) ---

def _work_dir(name: str) -> Path:
    path = state_base() / "hooks" / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def _env_value(value) -> str:
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def hook_script(c: dict) -> dict:
    """heat-config-script: the config is the program; inputs are environment variables;
    each declared output is read from the file `$heat_outputs_path.<name>`."""
    work, outdir = _work_dir("script"), _work_dir("script-outputs")
    env = dict(os.environ)
    for i in c.get("inputs") or []:
        env[str(i["name"])] = _env_value(i.get("value"))
    path = work / str(c["id"])
    outputs_path = outdir / str(c["id"])
    env["heat_outputs_path"] = str(outputs_path)
    path.unlink(missing_ok=True)
    with os.fdopen(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o700), "w") as f:
        f.write(c.get("config") or "")
    try:
        p = subprocess.run([str(path)], env=env, capture_output=True, cwd=str(work))
        code, out, err = p.returncode, _text(p.stdout), _text(p.stderr)
    except OSError as exc:  # e.g. no #! line: the kernel cannot run it
        code, out, err = 126, "", f"cannot run the script: {exc.strerror}"
    response: dict = {}
    for o in c.get("outputs") or []:
        f = Path(f"{outputs_path}.{o['name']}")
        if f.is_file():
            response[o["name"]] = f.read_text(errors="replace")
    response.update(deploy_stdout=out, deploy_stderr=err, deploy_status_code=code)
    return response


def hook_json_file(c: dict) -> dict:
    """heat-config json-file: config maps file paths to content, written as JSON."""
    config = c.get("config") or {}
    if isinstance(config, str):
        config = json.loads(config)
    written = []
    for path, content in config.items():
        p = Path(path)
        mode = p.stat().st_mode & 0o7777 if p.exists() else 0o644  # as it was, or as a plain write made it
        files.write_atomic(p, content if isinstance(content, str) else json.dumps(content, indent=2, sort_keys=True),
                           mode)
        written.append(str(p))
    return {"deploy_stdout": "\n".join(f"wrote {w}" for w in written), "deploy_stderr": "",
            "deploy_status_code": 0}


def hook_apply_config(c: dict) -> dict:
    """heat-config apply-config: render the os-apply-config template tree from the
    node's merged metadata with this deployment's config merged last (it wins)."""
    config = c.get("config") or {}
    if isinstance(config, str):
        config = json.loads(config)
    merged_file = state_base() / "merged.json"
    base = json.loads(merged_file.read_text()) if merged_file.is_file() else {}
    templates = Path(os.environ.get("OS_CONFIG_APPLIER_TEMPLATES", "/usr/libexec/os-apply-config/templates"))
    output = Path(os.environ.get("UNDERCLOUD_AGENT_OUTPUT_ROOT", "/"))
    try:
        written = oac.apply_config(templates, output, oac.merge_sources([base, config]))
    except (oac.ApplyError, OSError) as exc:
        return {"deploy_stdout": "", "deploy_stderr": str(exc), "deploy_status_code": 1}
    return {"deploy_stdout": "\n".join(f"wrote {w}" for w in written), "deploy_stderr": "",
            "deploy_status_code": 0}


def hook_main(group: str) -> int:
    c = json.load(sys.stdin)
    if group == "kube":
        from undercloud.agent.kube import hook_kube as fn
    else:
        fn = {"script": hook_script, "json-file": hook_json_file, "apply-config": hook_apply_config}.get(group)
    if fn is None:
        print(f"no built-in hook {group!r}", file=sys.stderr)
        return 2
    json.dump(fn(c), sys.stdout)
    return 0
