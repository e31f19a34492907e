"""``advisor controller``: read the settings, connect to the cluster, run until SIGTERM."""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from advisor.controller.settings import load_settings


def run_controller(*, config: Path | None, kubeconfig: Path | None, context: str | None, check_only: bool,
                   log_level: str | None = None) -> int:
    """``log_level``: the command line's -q (WARNING) or -v (DEBUG), over the settings' ``log_level``."""
    overrides: dict[str, Any] = {}
    if kubeconfig is not None:
        overrides["kubeconfig"] = kubeconfig
    if context is not None:
        overrides["kube_context"] = context
    settings = load_settings(config, **overrides)
    if check_only:
        from advisor.controller.pipeline.refit import refit_config

        refit_config(settings)  # a refit setting that cannot work: one line, exit 2 (a running controller warns)
        print(json.dumps(settings.model_dump(mode="json"), indent=2, sort_keys=True))
        return 0
    logging.basicConfig(level=log_level or settings.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from advisor.controller.app import Controller
    from advisor.controller.kube.client import Kube

    kube = Kube.from_config(settings.kubeconfig, settings.kube_context)
    controller = Controller(settings, kube, settings_file=config or _env_config())
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    controller.start()
    try:
        stop.wait()
    finally:
        controller.stop()
    return 0


def _env_config() -> Path | None:
    import os

    from advisor.controller.settings import CONFIG_FILE_ENV

    path = os.environ.get(CONFIG_FILE_ENV)
    return Path(path) if path else None
