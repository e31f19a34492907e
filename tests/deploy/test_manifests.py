"""The plain manifests, the example TFJob, the Dockerfile and .dockerignore, and the docs that
describe them, checked against the chart and the code they stand for."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from typing import Any

import pytest
import yaml

from tests.deploy.helm_render import CHART, REPO, helm

DEPLOY = REPO / "deploy"
EXAMPLE_TFJOB = DEPLOY / "example-tfjob.yaml"
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
DEPLOY_DOC = REPO / "docs" / "deploy.md"


def render_deploy_script() -> Any:
    spec = importlib.util.spec_from_file_location("render_deploy", REPO / "scripts" / "render_deploy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- deploy/ ------------------------------------------------------------------------------------


def test_plain_manifests_are_the_chart_rendered_with_defaults() -> None:
    helm()
    expected = render_deploy_script().render()
    assert (DEPLOY / "advisor.yaml").read_text() == expected, (
        "deploy/advisor.yaml is out of date: run python scripts/render_deploy.py")


def test_plain_manifests_are_valid_and_namespaced() -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed")
    docs = [d for d in yaml.safe_load_all((DEPLOY / "advisor.yaml").read_text()) if d]
    assert docs[0] == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "advisor-system"}}
    for doc in docs:
        kv.validate(doc, kv.latest_version(), strict=True)


def example_tfjob() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE_TFJOB.read_text())
    return doc


def test_example_tfjob_is_opted_in_and_profilable() -> None:
    job = example_tfjob()
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "TFJob")
    assert job["metadata"]["annotations"]["training-advisor.io/enabled"] == "true"
    specs = job["spec"]["tfReplicaSpecs"]
    assert set(specs) == {"PS", "Worker"} and specs["PS"]["replicas"] == 1 and specs["Worker"]["replicas"] >= 1
    for kind, spec in specs.items():
        (container,) = spec["template"]["spec"]["containers"]
        assert container["name"] == "tensorflow", f"{kind}: the training operator expects the container 'tensorflow'"
        command = " ".join(container.get("command", []) + container.get("args", []))
        assert "train_ps.py" in command, f"{kind} must run the example program"


def test_example_tfjob_pod_templates_are_valid() -> None:
    """No TFJob schema is available offline; its pod templates are core PodTemplateSpecs, so they
    are validated as PodTemplates against the Kubernetes schema."""
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed")
    for kind, spec in example_tfjob()["spec"]["tfReplicaSpecs"].items():
        template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": kind.lower()},
                    "template": spec["template"]}
        kv.validate(template, kv.latest_version(), strict=True)


def test_example_tfjob_runs_the_example_program_with_its_flags() -> None:
    """The example program is a sibling's file; its flags must be the ones the TFJob passes."""
    program = DEPLOY / "example" / "train_ps.py"
    if not program.exists():
        pytest.skip("deploy/example/train_ps.py is not there yet")
    flags = set(re.findall(r'add_argument\("(--[\w-]+)"', program.read_text()))
    for spec in example_tfjob()["spec"]["tfReplicaSpecs"].values():
        (container,) = spec["template"]["spec"]["containers"]
        used = {a.split("=")[0] for a in container.get("args", []) if a.startswith("--")}
        assert used <= flags, f"unknown flags {used - flags}"


def controller_annotations() -> set[str]:
    """Every training-advisor.io/ key the controller's modules define."""
    keys: set[str] = set()
    for name in ("pipeline.annotations", "pipeline.policy", "pipeline.deadline", "jobs.tfjob", "state.formats",
                 "state.records", "pipeline.prediction_job"):
        module = pytest.importorskip(f"advisor.controller.{name}", reason="controller dependencies missing")
        keys |= {v for v in vars(module).values()
                 if isinstance(v, str) and re.fullmatch(r"training-advisor\.io/[\w.-]+", v)}
    return keys


def test_docs_and_example_name_only_annotations_the_controller_knows() -> None:
    known = controller_annotations()
    pattern = re.compile(r"training-advisor\.io/[a-z][\w.-]*[a-z]")
    for path in (DEPLOY_DOC, EXAMPLE_TFJOB, CHART / "README.md", CHART / "templates" / "NOTES.txt"):
        used = set(pattern.findall(path.read_text()))
        assert used <= known, f"{path.relative_to(REPO)} names annotations the controller does not use: {used - known}"


def test_docs_show_the_dashboard_screenshot() -> None:
    text = DEPLOY_DOC.read_text()
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert "img/dashboard.png" in images
    assert (DEPLOY_DOC.parent / "img" / "dashboard.png").stat().st_size > 50_000


# --- Dockerfile ---------------------------------------------------------------------------------


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    instructions, current = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        current += " " + stripped.rstrip("\\").strip() if current else stripped.rstrip("\\").strip()
        if not stripped.endswith("\\"):
            keyword, _, args = current.partition(" ")
            instructions.append((keyword.upper(), args.strip()))
            current = ""
    return instructions


def stages(instructions: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for keyword, args in instructions:
        if keyword == "FROM":
            result.append([])
        result[-1].append((keyword, args))
    return result


def test_dockerfile_parser() -> None:
    parsed = dockerfile_instructions("# c\nFROM a:1 AS b\nRUN x \\\n  && y\n# inner\nUSER 1\n")
    assert parsed == [("FROM", "a:1 AS b"), ("RUN", "x && y"), ("USER", "1")]


def test_dockerfile_is_multi_stage_pinned_and_non_root() -> None:
    text = DOCKERFILE.read_text()
    instructions = dockerfile_instructions(text)
    all_stages = stages(instructions)
    assert len(all_stages) >= 2, "build in one stage, ship another"
    for stage in all_stages:
        image = stage[0][1].split()[0]
        if "@sha256:" in image:
            continue
        name, _, tag = image.partition(":")
        assert tag and tag != "latest", f"{image}: pin the base image"
        assert re.match(r"\d+\.\d+\.\d+", tag), f"{image}: pin an exact version, not {tag!r}"
    final = all_stages[-1]
    keywords = [k for k, _ in final]
    assert "COPY" in keywords and any(a.startswith("--from=") for k, a in final if k == "COPY")
    users = [a for k, a in final if k == "USER"]
    assert users, "the final stage must set USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) > 0 and (not gid or int(gid) > 0), "a numeric non-root USER (runAsNonRoot)"
    entry = json.loads(next(a for k, a in final if k == "ENTRYPOINT"))
    assert entry == ["advisor"]
    assert json.loads(next(a for k, a in final if k == "CMD")) == ["controller"]
    assert "8080" in " ".join(a for k, a in final if k == "EXPOSE")
    # Read-only root filesystem: nothing may need to write outside /tmp and the store volume.
    env = " ".join(a for k, a in final if k == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    # The engine's numba cache is built in the build stage into the directory NUMBA_CACHE_DIR names,
    # read-only at run time (advisor.jit_cache copies it under /tmp, which is writable).
    cache = next(w.split("=", 1)[1] for w in env.split() if w.startswith("NUMBA_CACHE_DIR="))
    assert cache.startswith("/opt/advisor/") and f"-m advisor.jit_cache build {cache}" in text
    assert "NUMBA_CPU_NAME=generic" in env  # a cache for any x86-64 node, not the build machine's CPU
    # Kubernetes ignores HEALTHCHECK; the chart's probes are documented instead.
    if "HEALTHCHECK" not in keywords:
        assert "/healthz" in text and "/readyz" in text, "document the probes when there is no HEALTHCHECK"


def test_image_runs_as_the_user_the_chart_expects() -> None:
    final = stages(dockerfile_instructions(DOCKERFILE.read_text()))[-1]
    uid = int([a for k, a in final if k == "USER"][-1].split(":")[0])
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["podSecurityContext"]["runAsUser"] == uid
    store = values["persistence"]["mountPath"]
    assert f"install -d -o {uid} -g {uid} -m 0750 {store}" in " ".join(a for k, a in final if k == "RUN")


def dockerignore_excludes(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; a pattern matching a parent directory
    matches everything under it; ``**`` spans directories, ``*`` does not."""
    excluded = False
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw[1:] if negate else raw
        regex = re.escape(pattern.strip("/")).replace(r"\*\*/", "(?:.*/)?").replace(r"\*\*", ".*")
        regex = regex.replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
        if any(re.fullmatch(regex, p) for p in prefixes):
            excluded = not negate
    return excluded


def test_dockerignore_keeps_the_context_to_what_the_image_needs() -> None:
    patterns = [ln.strip() for ln in DOCKERIGNORE.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    for path in (".git/config", "tests/deploy/test_chart.py", "benchmarks/accuracy.py", "docs/deploy.md",
                 "helm/advisor/Chart.yaml", "deploy/advisor.yaml", "advisor.egg-info/PKG-INFO",
                 "advisor/__pycache__/cli.cpython-311.pyc", ".ci/run", "Dockerfile"):
        assert dockerignore_excludes(path, patterns), f"{path} should stay out of the build context"
    copied = [shlex.split(a)[:-1] for k, a in dockerfile_instructions(DOCKERFILE.read_text())
              if k == "COPY" and not a.startswith("--from")]
    for source in (s for sources in copied for s in sources):
        assert not dockerignore_excludes(source, patterns), f"the Dockerfile copies {source}, .dockerignore drops it"
    for path in ("advisor/cli.py", "advisor/data/example-mlp.profile.json.gz", "advisor/controller/main.py",
                 "advisor/core/models/ps_des/simulator/prebuilt/0.68.1/loop.run-1.py311.1.nbc"):  # the prebuilt engine (any file there)
        assert not dockerignore_excludes(path, patterns), path


EXAMPLE_DOCKERFILE = DEPLOY / "example" / "Dockerfile"


def test_example_image_builds_what_the_example_tfjob_runs() -> None:
    """docs/deploy.md's example image: pinned, its build context holds what it copies (its own
    Dockerfile.dockerignore: the root one keeps deploy/ out), TensorFlow within the package's
    extra, and the program where the example TFJob's command looks for it."""
    from packaging.specifiers import SpecifierSet

    instructions = dockerfile_instructions(EXAMPLE_DOCKERFILE.read_text())
    image = instructions[0][1].split()[0]
    assert re.fullmatch(r"[\w./-]+:\d+\.\d+\.\d+[\w.-]*", image), f"{image}: pin an exact version"
    ignore = EXAMPLE_DOCKERFILE.with_name("Dockerfile.dockerignore")
    patterns = [ln.strip() for ln in ignore.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    copies = [shlex.split(a) for k, a in instructions if k == "COPY"]
    for *sources, _ in copies:
        for source in sources:
            assert (REPO / source).exists(), source
            assert not dockerignore_excludes(source, patterns), f"{source} is copied but left out of the context"
    assert dockerignore_excludes("tests/deploy/test_chart.py", patterns) and dockerignore_excludes(".git/config", patterns)
    pinned = dict(re.findall(r"([\w-]+)==([\w.]+)", " ".join(a for k, a in instructions if k == "RUN")))
    pyproject = (REPO / "pyproject.toml").read_text()
    extra = re.search(r'tensorflow = \["tensorflow-cpu([^"]*)"\]', pyproject)
    assert extra and pinned.get("tensorflow-cpu") in SpecifierSet(extra.group(1)), pinned
    assert "prometheus-client" in pinned, "advisor.profiling imports prometheus_client at load time"
    program = next(dest for *_, dest in copies if dest.endswith("train_ps.py"))
    tfjob = yaml.safe_load(EXAMPLE_TFJOB.read_text())
    for spec in tfjob["spec"]["tfReplicaSpecs"].values():
        assert spec["template"]["spec"]["containers"][0]["command"][-1] == program
    user = [a for k, a in instructions if k == "USER"]
    assert user and not user[-1].startswith(("0", "root")), "run the example as a non-root user"


def test_the_profiling_library_needs_only_prometheus_client_besides_the_standard_library() -> None:
    """What lets the example image install the package with --no-deps: loading
    advisor.profiling (without TensorFlow, which the hook imports when first used) pulls in no
    third-party module but prometheus_client."""
    import subprocess
    import sys

    code = ("import sys; before = set(sys.modules); import advisor.profiling as p; "
            "from advisor.profiling import bundle, config, recorder, throughput, upload; "
            "print(' '.join(sorted({m.split('.')[0] for m in set(sys.modules) - before} "
            "- set(sys.stdlib_module_names))))")  # before: what site's .pth hooks load, not advisor
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert set(out.stdout.split()) == {"advisor", "prometheus_client"}, out.stdout


def test_the_chart_readme_names_every_alert() -> None:
    rules = yaml.safe_load((CHART / "alerts" / "advisor-rules.yaml").read_text())
    alerts = [r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r]
    readme = (CHART / "README.md").read_text()
    assert alerts and [a for a in alerts if f"`{a}`" not in readme] == []
