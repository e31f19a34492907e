"""A faithful Kubernetes API server emulator for tests (see server.py for why and how)."""

from tests.kube_emulator.server import Call, KubeEmulator

__all__ = ["Call", "KubeEmulator"]
