"""What the heavy suites share without importing TensorFlow or PyTorch."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from advisor.profiling import throughput


@pytest.fixture
def port() -> Iterator[int]:
    """A free port for ADVISOR_METRICS_PORT; the exporter a test started on it is closed afterwards."""
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        number = int(sock.getsockname()[1])
    yield number
    shared = throughput._shared.get(number)
    if shared is not None:
        shared.close()
