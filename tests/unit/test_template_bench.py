"""The template benchmark still runs (small tree; timing is printed, never asserted)."""

from __future__ import annotations

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


def test_tht_bench_baseline_is_this_checkout_with_the_template_package_of_the_commit(tmp_path):
    import importlib.util

    if subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True).returncode:
        pytest.skip("not a git checkout")
    spec = importlib.util.spec_from_file_location("tht_bench", REPO / "bench" / "tht_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    root = bench.baseline_tree("HEAD", tmp_path)
    sub = "undercloud/orchestration/template/source.py"
    head = subprocess.run(["git", "-C", str(REPO), "show", f"HEAD:{sub}"], capture_output=True, text=True).stdout
    assert (root / sub).read_text() == head
    assert (root / "undercloud" / "cli" / "main.py").read_text() == (REPO / "undercloud" / "cli" / "main.py").read_text()
