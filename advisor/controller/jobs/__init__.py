"""Job kinds: one module per kind, each a small adapter behind one protocol.

``kinds.py`` holds the protocol (``JobKind``: parse a job into its view, build its one-worker
profiling run, patch its worker count, the program its trace must be) and the registry
(``KINDS``, ``RESOURCES``) that the reconcile, ingest and garbage collection go through.
``tfjob.py`` (TFJob, with or without parameter servers) and ``pytorchjob.py`` (PyTorchJob) are
the kinds: pure functions of JSON, no API calls; ``requests.py`` reads what any kind's pods
request. ``cluster.py`` is their cluster side: which ``Kube`` calls read and write each kind's
resource, and one cache over all watched kinds.

A new kind is a module here, a ``Resource`` and ``JobKind`` registered in ``kinds.py``, its
calls in ``cluster.py`` and ``kube/client.py``, and its RBAC in the chart.
"""
