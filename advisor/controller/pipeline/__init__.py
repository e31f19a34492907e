"""From profiling run to prediction to annotation: the controller's work on each job.

``reconcile.py`` drives a job's steps (profile, predict, annotate, resize); ``ingest.py`` takes
its profiling run's upload. ``predictions.py`` runs a prediction in a process pool;
``prediction_job.py``, ``job_predictor.py`` and ``job_client.py`` run it in a Kubernetes Job
instead (the object, the controller's side, the Job's side). ``policy.py`` turns a prediction
into a recommendation and ``annotations.py`` writes it on the job. ``refit.py`` refits a running
job's curve to its throughput observed in Prometheus (``observed.py``); ``refit_worker.py`` is
the refit's step that runs with the prediction. ``allocation.py`` is cluster mode: jobs sharing a
capacity (a setting, or a Kueue ClusterQueue's quota read by ``kueue.py``) through the core
allocator. ``gc.py`` deletes what runs leave behind.
"""
