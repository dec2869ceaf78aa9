"""Orchestration: the HOT template language, the engine and resource plugins."""
