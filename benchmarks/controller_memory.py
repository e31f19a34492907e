"""Where the idle controller's memory goes: resident memory added by each import, and who imports what.

    python -m benchmarks.controller_memory

``advisor controller`` imports ``advisor.cli`` (the console script), then
``advisor.controller.main`` and ``advisor.controller.app``. This imports the same modules in a
fresh interpreter, one group at a time, the controller's own needs first and then what comes
with them, and prints the VmRSS each group adds; then, from ``python -X importtime``, the chain
of imports that brings each heavy package (numpy, numba, ...) into the controller's
process. The groups' sum is the idle process before its threads start (within a few MB; a
package shared by two groups counts in the first). ``python -m benchmarks.bench_controller``
measures the running process.
"""

from __future__ import annotations

import json
import subprocess
import sys

# (label, modules): cumulative, in this order.
GROUPS = (
    ("interpreter and standard library", ("json", "logging", "sqlite3", "http.server", "concurrent.futures",
                                          "multiprocessing")),
    ("settings: pydantic, pydantic-settings, yaml", ("pydantic", "pydantic_settings", "yaml")),
    ("kubernetes client (and kubernetes_validate when installed)", ("kubernetes",)),
    ("prometheus-client, apscheduler", ("prometheus_client", "apscheduler.schedulers.background")),
    ("numpy", ("numpy",)),
    ("protobuf and the trace importers (ingest)", ("advisor.importers.trace_upload", "advisor.importers.tf_profile")),
    ("the rest of advisor.controller", ("advisor.controller.main", "advisor.controller.app")),
    ("numba, llvmlite (advisor.core.models.ps_des.simulator, via advisor.cli)", ("numba",)),
    ("the rest of advisor.cli (the console script's module)", ("advisor.cli",)),
)
HEAVY = ("numpy", "numba", "llvmlite", "matplotlib", "kubernetes", "kubernetes_validate",
         "jsonschema", "pydantic", "google.protobuf")
CONTROLLER_IMPORTS = "import advisor.cli, advisor.controller.main, advisor.controller.app"

_MEASURE = """
import importlib, json, sys
def rss():
    with open("/proc/self/status") as fh:
        return next(int(l.split()[1]) * 1024 for l in fh if l.startswith("VmRSS"))
out = [rss()]
for modules in json.loads(sys.argv[1]):
    for m in modules:
        importlib.import_module(m)
    out.append(rss())
print(json.dumps({"rss": out, "modules": sorted(sys.modules)}))
"""


def _measure(groups: list[list[str]]) -> tuple[list[int], set[str]]:
    """VmRSS before and after each group of imports, in one fresh interpreter; and what it loaded."""
    run = subprocess.run([sys.executable, "-c", _MEASURE, json.dumps(groups)], capture_output=True, text=True,
                         check=True)
    answer = json.loads(run.stdout)
    return answer["rss"], set(answer["modules"])


def staged_rss() -> tuple[list[tuple[str, float]], list[str], float]:
    """(label, MB added) for each group the controller imports, measured cumulatively in one fresh
    interpreter; the groups it does not import; the controller's imports in one go (MB)."""
    whole, loaded = _measure([CONTROLLER_IMPORTS.removeprefix("import ").split(", ")])
    used = [(label, modules) for label, modules in GROUPS if set(modules) <= loaded]
    readings, _ = _measure([list(modules) for _, modules in used])
    rows = [("interpreter at start", readings[0] / 2**20)]
    rows += [(label, (after - before) / 2**20) for (label, _), before, after in zip(used, readings, readings[1:])]
    unused = [label for label, modules in GROUPS if not set(modules) <= loaded]
    return rows, unused, whole[-1] / 2**20


def import_chains() -> dict[str, list[str]]:
    """For each heavy package the controller loads, the chain of modules whose import brought it in."""
    run = subprocess.run([sys.executable, "-X", "importtime", "-c", CONTROLLER_IMPORTS], capture_output=True,
                         text=True, check=True)
    lines = []  # (depth, module) in the order Python prints them: children before their parent
    for line in run.stderr.splitlines():
        if line.startswith("import time:") and "|" in line and "cumulative" not in line:
            name = line.rsplit("|", 1)[1]
            lines.append(((len(name) - len(name.lstrip())) // 2, name.strip()))
    chains = {}
    for i, (depth, name) in enumerate(lines):
        if name in HEAVY and name not in chains:
            chain, want = [name], depth - 1
            for d, parent in lines[i + 1:]:
                if d == want:
                    chain.append(parent)
                    want -= 1
            chains[name] = chain[::-1]
    return chains


def main() -> None:
    rows, unused, whole = staged_rss()
    print("resident memory added by each group of imports (fresh interpreter, cumulative, MB):")
    for label, mb in rows:
        print(f"  {mb:6.1f}  {label}")
    print(f"  {sum(mb for _, mb in rows):6.1f}  sum; the controller's own imports in one go: {whole:.1f} MB "
          "(its process before the threads start)")
    for label in unused:
        print(f"     -    {label}: not imported by the controller")
    print(f"\nwho brings each heavy package into the controller's process ({CONTROLLER_IMPORTS}):")
    for name, chain in import_chains().items():
        print(f"  {name}: {' -> '.join(chain)}")


if __name__ == "__main__":
    main()
