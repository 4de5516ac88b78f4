"""Plumbing every part of the package shares, knowing nothing of the method: seeds, paths and atomic writes, JSONL
logs, file checks, metrics and their namespaces, several processes and sharded weights, HTTP server limits, BM25,
and the quieting of other libraries' logs. Nothing here imports a part of the method.
"""
