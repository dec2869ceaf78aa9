"""Fuzzing tier: schemathesis generates requests (valid and invalid) for every operation of
the service's OpenAPI and the service must never answer 5xx, and answer every 4xx with one
line. The run is confined to a new network namespace without routes (`unshare --net`), with
only the fake BMC driver: a fuzzed BMC address can reach nothing.

Headers are fuzzed as well (token headers with odd bytes), the public routes without the
admin token, the admin ones now and then without it (api_fuzz.py).

UNDERCLOUD_FUZZ_EXAMPLES (per operation and generation mode, default 40) and
UNDERCLOUD_FUZZ_BUDGET (seconds, default 240) bound it; UNDERCLOUD_FUZZ_SEED repeats a run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO

EXAMPLES = int(os.environ.get("UNDERCLOUD_FUZZ_EXAMPLES", "40"))
BUDGET = float(os.environ.get("UNDERCLOUD_FUZZ_BUDGET", "240"))


def confined() -> list[str]:
    """The command prefix that runs a process in a namespace without routes, or skip."""
    pytest.importorskip("schemathesis")
    if os.geteuid() != 0:
        pytest.skip("needs root: the fuzzing run is confined to its own network namespace (unshare --net)")
    for tool in ("unshare", "ip"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed")
    if subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode != 0:
        pytest.skip("cannot make a network namespace here (unshare --net refused)")
    return ["unshare", "--net"]


def test_no_operation_answers_5xx_or_more_than_one_line(capsys):
    cmd = [*confined(), sys.executable, "-m", "tests.fuzz.api_fuzz", "--examples", str(EXAMPLES),
           "--budget", str(BUDGET)]
    if os.environ.get("UNDERCLOUD_FUZZ_SEED"):
        cmd += ["--seed", os.environ["UNDERCLOUD_FUZZ_SEED"]]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=BUDGET + 300,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    lines = [x for x in r.stdout.splitlines() if x.startswith("{")]
    assert r.returncode == 0 and lines, r.stdout[-2000:] + r.stderr[-3000:]
    result = json.loads(lines[-1])
    assert "error" not in result, result["error"]
    with capsys.disabled():
        print(f"\nschemathesis: {result['operations']} operations, {result['examples']} examples tried in "
              f"{result['seconds']} s (seed {result['seed']}), {result['failure_count']} failures")
    assert result["failure_count"] == 0, json.dumps(result["failures"], indent=1)[:6000]
    assert not result["skipped"], f"over budget before: {result['skipped']}"
    assert result["operations"] >= 40 and result["examples"] >= result["operations"]
    assert result["health"]["status"] == 200 and result["health"]["seconds"] < 1.0
    assert result["health"]["keys"] == ["status", "version"]  # without the token: no more
