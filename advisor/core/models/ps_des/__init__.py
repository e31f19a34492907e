"""Asynchronous parameter-server training simulated as Li et al. (ICPE'20) do, with the
product's contention rules: the engines (``simulator/``), the rules (``contention.py``), fitting
them to a cluster (``fit_contention.py``) and the protocol adapter (``model.py``)."""

from advisor.core.models.ps_des.model import PsDes

MODELS = (PsDes(contention=True), PsDes(contention=False))
