"""Undercloud: deploy and operate a cloud's control plane the TripleO way."""

__version__ = "0.1.0"


def tune_gc() -> None:
    """Set this process's cyclic garbage collector for what undercloud does: templates and
    the engine build 100,000s of small containers and keep most of them, and at the default
    (a young pass every 700 allocations, which lets a full pass follow every quarter of
    growth) the collector takes a fifth of loading a big tree. Every 5,000 allocations it
    takes a tenth as much; memory grows by the few thousand objects waiting."""
    import gc

    gc.set_threshold(5000, 10, 10)
