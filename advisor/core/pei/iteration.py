"""One training iteration on W GPUs (Pei et al. 2019, eq. 1 and Algorithm 1).

    t_total = t_read + sum t_forward + sum t_backward + t_update

- t_read: the per-GPU input batch copied from the host over its link (shared ``link_num`` ways);
  zero when the spec has no ``links`` section (nothing is known about the link).
- t_forward, t_backward: the layers' kernels (``layers.network_times``); in NCCL mode the backward
  windows that overlap an all-reduce are slowed by sm / (sm - 1) (eq. 31).
- t_update: on one GPU, the SGD update kernel over all weights (read w, read g, write w); on W > 1
  GPUs the exposed transmission of PS mode (eq. 22-25; the host applies the update) or NCCL mode
  (eq. 26-32, plus the SGD kernel, which each GPU still runs after the all-reduce: eq. 26 omits it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from advisor.core.pei import transmission
from advisor.core.pei.kernels import elementwise, kernel_time
from advisor.core.pei.layers import LayerTime, network_times
from advisor.core.spec import Sigmoid, Spec

Mode = Literal["ps", "nccl"]


@dataclass(frozen=True)
class Iteration:
    workers: int
    mode: Mode
    batch: int  # per GPU
    t_read: float
    t_forward: float
    t_backward: float
    t_update: float
    link_seconds: float  # busy time of the busiest link per iteration (input + gradients)
    layers: tuple[LayerTime, ...]

    @property
    def total(self) -> float:
        return self.t_read + self.t_forward + self.t_backward + self.t_update

    @property
    def examples_per_second(self) -> float:
        return self.workers * self.batch / self.total


def link_share(workers: int, links: int) -> int:
    """Pei's link_num: GPUs sharing one host link when ``workers`` GPUs spread over ``links`` links."""
    return math.ceil(workers / links)


def _windows(layers: list[LayerTime]) -> tuple[list[float], list[float], list[int]]:
    """Gradient bytes, backward windows and indices of the layers with weights (network order).

    The window of weighted layer i is the backward time of the layers below it down to and
    including the next weighted layer below: what runs while layer i's gradient travels.
    """
    weighted = [i for i, lt in enumerate(layers) if lt.gradient_bytes > 0]
    grad_bytes = [float(layers[i].gradient_bytes) for i in weighted]
    windows = [0.0]
    for j in range(1, len(weighted)):
        windows.append(sum(layers[i].backward.seconds for i in range(weighted[j - 1], weighted[j])))
    return grad_bytes, windows, weighted


def predict_iteration(spec: Spec, workers: int, mode: Mode | None = None, dop: float = 1.0,
                      batch: int | None = None, curve: Sigmoid | None = None,
                      memory_floor: bool = True) -> Iteration:
    """Iteration time of ``spec`` on ``workers`` GPUs. The spec must have layers, a batch and a GPU
    (and links when ``workers`` > 1); the caller (the model) checks that and names what is missing.
    ``curve`` replaces the links' own throughput curve (e.g. one fitted to a profile)."""
    gpu = spec.gpu
    per_gpu = batch if batch is not None else spec.batch
    if gpu is None or per_gpu is None or not spec.layers:
        raise ValueError("predict_iteration needs layers, a batch and a gpu")
    links = spec.links
    chosen: Mode = mode if mode is not None else (links.mode if links is not None else "ps")
    data_bytes = max(1, spec.data_width // 8)
    layers = network_times(spec.layers, per_gpu, gpu, dop, spec.data_width, memory_floor=memory_floor)
    t_forward = sum(lt.forward.seconds for lt in layers)
    t_backward = sum(lt.backward.seconds for lt in layers)
    if links is not None and curve is None:
        curve = links.sigmoid or transmission.latency_bandwidth_curve(links.bandwidth_gbps, links.latency_us * 1e-6)
    share = link_share(workers, links.count) if links is not None else 1
    first = spec.layers[0]
    input_bytes = per_gpu * first.in_channels * first.height * first.width * ((first.data_width or spec.data_width) // 8)
    t_read = transmission.seconds(curve, input_bytes) * share if curve is not None else 0.0
    link_seconds = t_read
    weights = sum(lt.layer.parameters for lt in layers)
    sgd = elementwise("sgd-update", max(1, weights), 2, 1, 2, data_bytes)
    t_sgd = kernel_time(sgd, gpu, dop, memory_floor=memory_floor).seconds
    if workers == 1:
        t_update = t_sgd
    else:
        if links is None or curve is None:
            raise ValueError("predict_iteration needs links for more than one GPU")
        grad_bytes, windows, _ = _windows(layers)
        if chosen == "ps":
            ps = transmission.ps_update(grad_bytes, windows, workers, share, curve, links.latency_us * 1e-6,
                                        links.host_reduce_gbps)
            t_update = ps.t_update
            link_seconds += ps.link_seconds
        else:
            nccl = transmission.nccl_update(grad_bytes, windows, workers, curve, gpu, data_bytes)
            t_update = nccl.t_update + t_sgd
            t_backward += nccl.backward_extra
            link_seconds += nccl.link_seconds
    return Iteration(workers, chosen, per_gpu, t_read, t_forward, t_backward, t_update, link_seconds, tuple(layers))
