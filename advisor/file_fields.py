"""Fields that the command line's YAML files share (``fit-contention --jobs``, ``allocate``): a
link rate, a duration, a Kubernetes quantity. Each is kept as the text the user wrote and checked
when the file is read, so that pydantic's error names the field and the file's line stays
readable; the value is parsed again where it is used."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import AfterValidator

from advisor.core.units import parse_bandwidth, parse_duration, parse_quantity


def _checked(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        parse(value)
        return value
    return check


Rate = Annotated[str, AfterValidator(_checked(parse_bandwidth))]  # "100Mbit/s"
Duration = Annotated[str, AfterValidator(_checked(parse_duration))]  # "20ms"
Quantity = Annotated[float | str, AfterValidator(_checked(parse_quantity))]  # 4, "500m", "16Gi"


def load_yaml(path: Path, error: Callable[[str], Exception]) -> Any:
    """The file's YAML document; ``error(message)`` raised with one line naming the file and,
    for bad YAML, the line and column and what is wrong there."""
    try:
        return yaml.safe_load(path.read_text())
    except OSError as exc:
        raise error(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise error(f"{path}: not valid YAML{where}: {problem}") from None
