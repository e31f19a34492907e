"""Asynchronous parameter-server training simulated as Li et al. (ICPE'20) do, with the
product's contention rules: the engines (``simulator/``), the rules (``contention.py``), fitting
them to a cluster (``fit_contention.py``) and the protocol adapter (``model.py``); the synchronous
variant (``sync.py``) and the PS-count what-if's placement (``placement.py``)."""

from advisor.core.models.ps_des.model import PsDes
from advisor.core.models.ps_des.sync import PsDesSync

MODELS = (PsDes(contention=True), PsDes(contention=False), PsDesSync(contention=True), PsDesSync(contention=False))
