"""Analyses of stored results: pure functions from measured points to findings.

memory.py  cache levels from a latency-vs-working-set curve (memlat), labels for
           bandwidth points, the operating system's view of the caches.
"""
