"""Huang et al., "Simulating Performance of ML Systems with Offline Profiling" (seed
``huang-offline-profiling-simulation.txt``): an op-level profile database (``opdb``) and a
dataflow replay of the step graph over per-device FIFO queues (``replay``). Pure: the database
file is read and written by ``advisor.importers.opdb_file``; ``docs/models-huang.md`` states the
equations and the validation."""
