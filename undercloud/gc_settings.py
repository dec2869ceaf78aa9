"""The garbage collector's settings for long work in one process: the service (daemon.serve),
the template commands that run locally, and the benchmarks that time what the service does.

CPython 3.11 makes a full collection once ten middle ones have passed and the objects that
lasted into its oldest generation grew by a quarter since the last. Loading a stack's template
tree makes hundreds of thousands of lasting objects at once, so a tree of 20,000 resources ran
six full collections, each walking every object: 40 % of its time (bench/template_bench.py).
A full collection every 100 middle ones at most (the quarter rule stays) collects young
garbage as before and cut that to one: the tree loads in 0.69 of the time, at the same peak
memory (measure it again with bench/template_bench.py).
"""

from __future__ import annotations

import gc

FULL_AFTER = 100  # middle collections between two full ones at least (CPython's default: 10)


def apply() -> None:
    first, middle, _ = gc.get_threshold()
    gc.set_threshold(first, middle, FULL_AFTER)
