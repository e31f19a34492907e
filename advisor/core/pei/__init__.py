"""Pei et al. 2019 ("Iteration time prediction for CNN in multi-GPU platform", IEEE Access): the
layer-wise GPU compute model (abstract instruction queue) and the PS/NCCL transmission model.

``kernels`` (eq. 6-19), ``layers`` (eq. 2-5), ``transmission`` (eq. 20-32), ``iteration`` (eq. 1).
The throughput model that the CLI sees is ``advisor.core.models.pei``.
"""
