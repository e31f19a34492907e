"""HTTP and metrics: what the controller serves and exports.

``http_api.py`` is the HTTP server (trace uploads, the prediction Jobs' routes, ``/healthz``,
``/metrics``); ``metrics.py`` defines every Prometheus series, in one namespace; ``memory.py``
gives back the heap a large upload (or, in the prediction worker, a prediction) freed.
"""
