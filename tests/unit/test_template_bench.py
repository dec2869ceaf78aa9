"""The template benchmark still runs (small tree; timing is printed, never asserted)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def test_bench_runs_a_small_tree():
    r = subprocess.run([sys.executable, str(REPO / "bench" / "template_bench.py"), "--mids", "2", "--leaves", "3",
                        "--per-template", "4"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    # 2 mids + 6 leaves nested; 2 + 2*(3+4) + 6*4 = 40 resources; top + 2 + 6 files
    assert "tree: 8 nested template resources, 40 resources in total, 9 files" in r.stdout
    assert "top outputs 1" in r.stdout and "sample 'None'" not in r.stdout
