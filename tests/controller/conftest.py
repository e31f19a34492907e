"""Fixtures the controller's end-to-end tests share: an API emulator and a real trace upload."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.controller.harness import NS, trace_body
from tests.kube_emulator import KubeEmulator


@pytest.fixture
def emu() -> Iterator[KubeEmulator]:
    """A fresh emulator holding namespace ``NS``, with bookmarks every 0.5 s (a module may
    define its own ``emu`` for other namespaces or settings)."""
    with KubeEmulator(namespaces=[NS], bookmark_interval_s=0.5) as e:
        yield e


@pytest.fixture(scope="module")
def body() -> bytes:
    """The profiling pod's upload: the real mlp trace recorded at 100 Mbit/s, as a bundle."""
    return trace_body("mlp_bw100")
