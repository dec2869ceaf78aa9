"""The template benchmark still runs (small tree; timing is printed, never asserted)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO


def test_bench_runs_a_small_tree():
    r = subprocess.run([sys.executable, str(REPO / "bench" / "template_bench.py"), "--mids", "2", "--leaves", "3",
                        "--per-template", "4"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    # 2 mids + 6 leaves nested; 2 + 2*(3+4) + 6*4 = 40 resources; top + 2 + 6 files
    assert "tree: 8 nested template resources, 40 resources in total, 9 files" in r.stdout
    assert "top outputs 1" in r.stdout and "sample 'None'" not in r.stdout


def _git_checkout() -> None:
    if not shutil.which("git"):
        pytest.skip("git is not installed")
    if subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True).returncode:
        pytest.skip("not a git checkout")


def test_a_bench_baseline_is_this_checkout_with_the_template_package_of_the_commit(tmp_path, monkeypatch):
    _git_checkout()
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    from bench_store import baseline_tree

    root = baseline_tree("HEAD", tmp_path)
    sub = "undercloud/orchestration/template/source.py"
    head = subprocess.run(["git", "-C", str(REPO), "show", f"HEAD:{sub}"], capture_output=True, text=True).stdout
    assert (root / sub).read_text() == head
    assert (root / "undercloud" / "cli" / "main.py").read_text() == (REPO / "undercloud" / "cli" / "main.py").read_text()


def test_bench_beside_a_baseline_prints_both_and_their_ratio():
    _git_checkout()
    r = subprocess.run([sys.executable, str(REPO / "bench" / "template_bench.py"), "--mids", "1", "--leaves", "2",
                        "--per-template", "3", "--baseline", "HEAD", "--runs", "1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "median of 1 runs each, interleaved (s):"
    assert lines[2].startswith("this ") and lines[3].startswith("baseline HEAD ")
    assert len(lines[2].split()) == 6 and float(lines[2].split()[4]) > 0  # 3 phases, total, best
    assert lines[4].startswith("ratio this / baseline: total ")


def test_an_unknown_baseline_is_one_line():
    _git_checkout()
    r = subprocess.run([sys.executable, str(REPO / "bench" / "template_bench.py"), "--baseline", "no-such-ref"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert r.stderr.startswith("--baseline no-such-ref: ") and len(r.stderr.strip().splitlines()) == 1
    assert "Traceback" not in r.stderr
