"""The Kubernetes seam: the one room that talks to the API server.

``client.py`` is the only module that imports the ``kubernetes`` client (an import-linter
contract in pyproject.toml keeps it so): it turns API objects into plain JSON and the client's
errors into ``advisor.errors.KubeError``. Beside it, what a controller builds on those calls, as
client-go does: ``informer.py`` (list-then-watch into a local cache), ``leader.py`` (leader
election on a Lease) and ``workqueue.py`` (keyed, rate-limited retries). Nothing here knows job
kinds, predictions or the store.
"""
