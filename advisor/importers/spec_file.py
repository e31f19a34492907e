"""Reading ``--spec FILE.yaml``: the file edge of ``advisor.core.spec``.

YAML (or JSON, which YAML reads too) becomes a ``Spec``; an unreadable file, a YAML syntax error
or an invalid field becomes ``SpecError`` naming the file and, for fields, their paths. The
example specs shipped in ``advisor/data`` are found by ``example_spec_path``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from advisor.core.dts.spec import DtsSpec
from advisor.core.spec import Spec, parse_spec
from advisor.errors import SpecError

MAX_BYTES = 16 * 1024 * 1024  # a spec is a few kB; refuse to parse anything absurd


def load_spec(path: Path | str) -> Spec:
    """The spec in ``path``; every problem is a ``SpecError`` naming the file."""
    return parse_spec(read_spec_document(path), source=str(path))


def read_spec_document(path: Path | str) -> dict[str, Any]:
    """The YAML mapping in ``path``, its sections checked against those the models read (layers,
    batch, gpu, links for Pei; cluster, dnn, training for DTS); each model validates its own."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise SpecError(f"spec {path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise SpecError(f"spec {path}: larger than {MAX_BYTES} bytes; not a spec file")
    try:
        data = yaml.safe_load(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise SpecError(f"spec {path}: not UTF-8 text") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(f"spec {path}: not valid YAML{where}: {problem}") from None
    if data is None:
        raise SpecError(f"spec {path}: the file is empty")
    if not isinstance(data, dict):
        raise SpecError(f"spec {path}: expected a mapping of sections at the top, got {type(data).__name__}")
    known = set(Spec.model_fields) | set(DtsSpec.model_fields)
    unknown = sorted(str(k) for k in data if k not in known)
    if unknown:
        raise SpecError(f"spec {path}: unknown section(s) {', '.join(unknown)}; the sections are "
                        f"{', '.join(sorted(known))}")
    return data


def example_spec_path(name: str) -> Path:
    """Path of a bundled example spec: ``alexnet`` or ``resnet50``."""
    found = resources.files("advisor") / "data" / f"{name}.spec.yaml"
    if not found.is_file():
        raise SpecError(f"no bundled example spec {name!r}; the examples are alexnet, resnet50")
    return Path(str(found))
