"""The image and CI install exactly the locked, hashed dependencies; pyproject's bounds keep out
the major releases that break the package; the image's build keeps the dependency layer before
the source and leaves no installer behind; scipy is no runtime dependency.

The image itself cannot be built here (no Docker daemon in the test environment): its size is
measured by ``python -m benchmarks.image_size`` on the same lock and the same slimming script.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
LOCKS = REPO / "requirements"
DOCKERFILE = REPO / "Dockerfile"
PROTO = REPO / "advisor" / "importers" / "_proto"
sys.path.insert(0, str(REPO / "scripts"))
import slim_venv  # noqa: E402  (scripts/ is no package)


def pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def locked(name: str) -> dict[str, list[Version]]:
    """Package -> pinned versions (several where markers split them) of one lock file; every pin hashed."""
    text = (LOCKS / name).read_text()
    pins: dict[str, list[Version]] = {}
    for block in re.split(r"\n(?=\S)", text):
        first = block.split("\\")[0].strip()
        if not first or first.startswith("#"):
            continue
        match = re.match(r"([A-Za-z0-9_.\-]+)==([^\s;]+)", first)
        assert match, f"{name}: not a pin: {first}"
        assert "--hash=sha256:" in block, f"{name}: {first} has no hash"
        pins.setdefault(canonicalize_name(match[1]), []).append(Version(match[2]))
    return pins


@pytest.mark.parametrize(("lock", "extras"), [("controller.lock", ()), ("test.lock", ("test",))])
def test_the_locks_pin_every_dependency_within_pyproject_bounds(lock: str, extras: tuple[str, ...]) -> None:
    project = pyproject()["project"]
    requirements = [Requirement(r) for r in project["dependencies"]]
    for extra in extras:
        requirements += [Requirement(r) for r in project["optional-dependencies"][extra]]
    pins = locked(lock)
    for req in requirements:
        name = canonicalize_name(req.name)
        assert name in pins, f"{lock} lacks {req.name}: run scripts/lock.sh"
        for version in pins[name]:
            assert req.specifier.contains(version, prereleases=True), f"{lock}: {name}=={version} outside {req}"


def test_scipy_is_no_runtime_dependency() -> None:
    runtime = {canonicalize_name(Requirement(r).name) for r in pyproject()["project"]["dependencies"]}
    assert "scipy" not in runtime and "scipy" not in locked("controller.lock")


def test_protobuf_stays_in_the_major_release_the_generated_code_targets() -> None:
    (gencode,) = {Version(m) for f in PROTO.glob("*_pb2.py")
                  for m in re.findall(r"# Protobuf Python Version: (\S+)", f.read_text())}
    (spec,) = [Requirement(r) for r in pyproject()["project"]["dependencies"] if r.startswith("protobuf")]
    assert spec.specifier.contains(gencode)
    assert not spec.specifier.contains(Version(f"{gencode.major + 1}.0.0")), "the next protobuf major must be excluded"


@pytest.mark.parametrize("name", ["numpy", "pydantic", "numba", "protobuf", "apscheduler", "urllib3",
                                  "prometheus-client", "pydantic-settings", "pyyaml"])
def test_runtime_dependencies_have_an_upper_bound(name: str) -> None:
    (req,) = [Requirement(r) for r in pyproject()["project"]["dependencies"] if canonicalize_name(Requirement(r).name) == name]
    assert any(s.operator in ("<", "<=", "~=", "==") for s in req.specifier), f"{req} has no upper bound"


def dockerfile_stages() -> list[list[str]]:
    """The Dockerfile's instructions (continuation lines joined), split by FROM."""
    lines, current = [], ""
    for raw in DOCKERFILE.read_text().splitlines():
        if raw.lstrip().startswith("#") or not raw.strip():
            continue
        current += raw.rstrip("\\").rstrip() + " "
        if not raw.rstrip().endswith("\\"):
            lines.append(current.strip())
            current = ""
    stages: list[list[str]] = []
    for line in lines:
        if line.startswith("FROM "):
            stages.append([])
        stages[-1].append(line)
    return stages


def test_the_image_installs_the_lock_with_hashes_before_copying_the_source() -> None:
    build, final = dockerfile_stages()
    text = "\n".join(build)
    assert "--require-hashes --no-deps -r requirements/controller.lock" in text
    assert "--require-hashes --no-deps -r requirements/build.lock" in text
    index = {line: i for i, line in enumerate(build)}
    lock_install = next(i for line, i in index.items() if "requirements/controller.lock" in line and "RUN" in line)
    source_copy = next(i for line, i in index.items() if line.startswith("COPY advisor"))
    assert lock_install < source_copy, "the dependency layer must come before the source"
    # the package itself adds nothing unlocked
    assert all("--no-deps" in line for line in build if "pip install" in line)
    assert "slim_venv.py /opt/advisor" in text


def test_the_final_stage_has_no_installer_and_runs_as_non_root() -> None:
    _, final = dockerfile_stages()
    text = "\n".join(final)
    assert "pip install" not in text and "apt-get install" not in text
    assert "pip uninstall --yes --quiet pip setuptools wheel" in text
    (user,) = [line.split()[1] for line in final if line.startswith("USER ")]
    uid = int(user.split(":")[0])
    assert uid != 0
    # the chart's securityContext runs it with a read-only root FS and these UIDs
    values = (REPO / "helm" / "advisor" / "values.yaml").read_text()
    assert f"runAsUser: {uid}" in values and "readOnlyRootFilesystem: true" in values


def test_the_build_context_holds_what_the_dockerfile_copies() -> None:
    allowed = {line[1:] for line in (REPO / ".dockerignore").read_text().splitlines() if line.startswith("!")}
    copied = {src for stage in dockerfile_stages() for line in stage if line.startswith("COPY ")
              and "--from=" not in line for src in line.split()[1:-1]}
    assert copied <= allowed, f"copied but ignored: {sorted(copied - allowed)}"


def test_ci_installs_the_test_lock_with_hashes() -> None:
    run = (REPO / ".ci" / "run").read_text()
    assert "--require-hashes --no-deps -r requirements/test.lock" in run
    assert "-e '.[test]'" not in run


def test_slim_venv_removes_installers_tests_and_the_async_client(tmp_path: Path) -> None:
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    for rel in ("pip/__init__.py", "aiohttp/__init__.py", "numpy/__init__.py", "numpy/_core/tests/test_x.py",
                "kubernetes/client/__init__.py", "kubernetes/aio/client/__init__.py", "numba/tests/__init__.py"):
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text("x = 1\n")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "pip").write_text("#!/bin/sh\n")
    for dist, files in (("pip-25.0", ["pip/__init__.py", "../../../bin/pip"]), ("aiohttp-3.14.5", ["aiohttp/__init__.py"]),
                        ("numpy-2.4.6", ["numpy/__init__.py"])):
        info = site / f"{dist}.dist-info"
        info.mkdir()
        (info / "RECORD").write_text("".join(f"{f},sha256=x,1\n" for f in files))
    slim_venv.slim(tmp_path)
    left = {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()}
    assert left == {"lib/python3.11/site-packages/numpy/__init__.py",
                    "lib/python3.11/site-packages/numpy-2.4.6.dist-info/RECORD",
                    "lib/python3.11/site-packages/kubernetes/client/__init__.py"}


def test_the_core_predicts_and_calibrates_without_scipy() -> None:
    """scipy blocked: the batch-means interval and the calibration fit still run."""
    code = (
        "import sys; sys.modules['scipy'] = None\n"
        "import numpy as np\n"
        "from advisor.core.curve import batch_means\n"
        "ends = [np.arange(1, 201) * 0.01]\n"
        "mean, low, high = batch_means(ends, 0.0, 2.0, 10, batches=10)\n"
        "assert low <= mean <= high, (low, mean, high)\n"
        "from advisor.cli import main\n"
        "assert main(['calibrate']) == 0\n"  # the bundled example profile: NNLS for every (WIN, goodput)
        "print('ok')\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert run.stdout.strip().endswith("ok") and "goodput" in run.stdout, run.stderr


def test_package_data_holds_every_shipped_data_file() -> None:
    """Every file under advisor/data (the model-error folder's one <model>.json per model among them)
    matches a package-data glob, as setuptools expands them: a file left out is missing from the
    wheel and the image, and the installed advisor would predict without it."""
    package = REPO / "advisor"
    globs = pyproject()["tool"]["setuptools"]["package-data"]["advisor"]
    packaged = {path for pattern in globs for path in package.glob(pattern)}
    shipped = {p for p in (package / "data").rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert (package / "data" / "model_error" / "li2020-des+contention.json") in shipped
    assert sorted(str(p.relative_to(package)) for p in shipped - packaged) == []
