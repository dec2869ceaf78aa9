"""scripts/test-costs: what CI's tail says about a run — the slowest tests and why each failed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "test-costs"


def test_failures_come_last_with_their_tier_and_the_first_line_of_why(tmp_path):
    (tmp_path / "junit-e2e.xml").write_text(
        '<testsuites><testsuite>'
        '<testcase classname="tests.e2e.m" name="test_slow" time="90.5"/>'
        '<testcase classname="tests.e2e.m" name="test_bad" time="3">'
        '<failure message="AssertionError: vm2 went to ERROR&#10;assert False">trace</failure></testcase>'
        '</testsuite></testsuites>')
    (tmp_path / "junit-unit.xml").write_text(
        '<testsuites><testsuite><testcase classname="tests.unit.u" name="test_e" time="0.1">'
        '<error message="fixture broke">x</error></testcase></testsuite></testsuites>')
    (tmp_path / "junit-fuzz.xml").write_text("<not closed")  # a tier killed mid-write: said, not fatal
    out = subprocess.run([sys.executable, str(SCRIPT), *sorted(map(str, tmp_path.iterdir()))],
                         capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert lines[1].split() == ["90.5", "e2e", "tests.e2e.m::test_slow"]
    assert lines[-3] == "=== 2 failed (tier, test, the first line of why)"
    assert lines[-2] == "e2e          tests.e2e.m::test_bad (failure): AssertionError: vm2 went to ERROR"
    assert lines[-1] == "unit         tests.unit.u::test_e (error): fixture broke"
    assert "junit-fuzz.xml" in out.stderr


def test_a_clean_run_says_no_failures(tmp_path):
    (tmp_path / "junit-unit.xml").write_text(
        '<testsuites><testsuite><testcase classname="u" name="t" time="1"/></testsuite></testsuites>')
    out = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "junit-unit.xml")],
                         capture_output=True, text=True, check=True).stdout
    assert "failed" not in out and "u::t" in out
