"""Durable state: what survives a restart or a change of leader.

``store.py`` is the replica's SQLite file (profiling runs, traces, predictions, prediction Jobs);
``records.py`` keeps a job's profile and applied prediction in a ConfigMap the job owns, so a
new leader finishes the run; ``tokens.py`` derives each profiling run's upload token from one key.
"""
