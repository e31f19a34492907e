"""The Kubernetes controller, in rooms whose imports go one way (contracts in pyproject.toml):

- ``main.py`` (the process entry) and ``app.py`` (the wiring of everything below);
- ``pipeline/``: from profiling run to prediction to annotation;
- ``web/`` (HTTP and metrics) and ``state/`` (the store, the profile records, upload tokens);
- ``jobs/`` (the job kinds behind one protocol) and ``kube/`` (the one seam to the API server);
- ``settings.py``: the settings every room reads.
"""
