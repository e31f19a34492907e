"""DTS equations 1-5: the time of one batch in PL, FL, SL, PSL and FSL, from the time of each term.

Kept apart from the spec and the allocation so that each equation can be read against the paper
(and tested by hand) as written there. Every term is a numpy array: per-processor terms have shape
``(samples, n)`` (one column per client, edge server or pipeline stage), single terms ``(samples,)``;
``samples`` is 1 for the nominal time and the Monte-Carlo draws otherwise. The result has shape
``(samples,)``. Where the paper writes one symbol for terms of different processors we name them
apart (``server_forward`` for its T_F_k).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]


def pl(fetch: Array, forward: Array, backward: Array, write: Array) -> Array:
    """Eq. 1: T_PL = sum over layers i and processors j of [T_fe_jj' + T_F_ij + T_B_ij + T_wr_jj''].

    Each column is one pipeline stage j; ``forward``/``backward`` are the sums over the layers it
    holds, ``fetch`` what it fetches from the stage before (the batch itself for the first) and
    ``write`` what it writes to the next (nothing for the last)."""
    return (fetch + forward + backward + write).sum(axis=-1)


def fl(forward: Array, backward: Array, exchange: Array, average: Array) -> Array:
    """Eq. 2: T_FL = max_j[T_F_j + T_B_j] + max_j[2 T_tr_jk] + T_avg_k.

    ``exchange`` is a client's model sent to the server and received back (2 T_tr_jk when
    gradients and weights are the same size)."""
    return (forward + backward).max(axis=-1) + exchange.max(axis=-1) + average


def sl(fetch: Array, forward: Array, backward: Array, cut_transfer: Array, server_forward: Array,
       server_backward: Array, weight_pass: Array) -> Array:
    """Eq. 3: T_SL = sum_j[T_fe_j + T_F_j + T_B_j + 2 T_tr_k + T_F_k + T_B_k] + (n-1) T_trw_j,j+1.

    ``cut_transfer`` is 2 T_tr_k per client (activations up, their gradients down);
    ``server_forward``/``server_backward`` the server's work on that client's batch;
    ``weight_pass`` has n-1 columns: the client side's weights handed from client j to j+1."""
    clients = fetch + forward + backward + cut_transfer + server_forward + server_backward
    return clients.sum(axis=-1) + weight_pass.sum(axis=-1)


def psl(fetch: Array, forward: Array, backward: Array, cut_transfer: Array, server_forward: Array,
        server_backward: Array) -> Array:
    """Eq. 4: T_PSL = max_j[T_fe_j + T_F_j + T_B_j + 2 T_tr_j] + sum_j[T_F + T_B on the server].

    The clients run in parallel; the server works through their batches one after another."""
    return (fetch + forward + backward + cut_transfer).max(axis=-1) + (server_forward + server_backward).sum(axis=-1)


def fsl(fetch: Array, forward: Array, backward: Array, cut_transfer: Array, edge_forward: Array,
        edge_backward: Array, edge_upload: Array, average: Array) -> Array:
    """Eq. 5: T_FSL = max_j[T_fe_j + T_F_j + T_B_j + 2 T_tr_jj' + T_F_j' + T_B_j' + T_tr_j'j''] + T_avg.

    Column j is client j with its edge server j'; ``edge_upload`` is j' sending its model to the
    server j'' for the federated average."""
    paths = fetch + forward + backward + cut_transfer + edge_forward + edge_backward + edge_upload
    return paths.max(axis=-1) + average
