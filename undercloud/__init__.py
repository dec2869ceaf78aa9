"""Undercloud: deploy and operate a cloud's control plane the TripleO way."""

__version__ = "0.1.0"
