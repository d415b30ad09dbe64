"""Benchmarks: each prints a table and can write JSON (``--json FILE``).

Speed and memory are measured here, never asserted in timed tests.
"""
