"""Shared test support: fixtures that start real processes, strategies, helpers."""
