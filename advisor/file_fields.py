"""Fields that the command line's YAML files share (``fit-contention --jobs``, ``allocate``): a
link rate, a duration, a Kubernetes quantity. Each is kept as the text the user wrote and checked
when the file is read, so that pydantic's error names the field and the file's line stays
readable; the value is parsed again where it is used."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

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
