"""DTS (Robinson, Esposito, Zuluaga): training time of a DNN in five distributed architectures.

Pure core: ``spec`` (the input, DTS Table I), ``equations`` (eq. 1-5), ``architectures`` (roles and
terms), ``allocation`` (the role-allocation heuristic), ``simulate`` (best time, role graph and the
fluctuation interval). Reading YAML is the CLI's job (``advisor/dts_cli.py``).
"""

from advisor.core.dts.allocation import Allocation, allocate
from advisor.core.dts.simulate import ArchitectureResult, DtsResult, Interval, Role, simulate
from advisor.core.dts.spec import Architecture, DtsSpec, parse_spec

__all__ = [
    "Allocation", "Architecture", "ArchitectureResult", "DtsResult", "DtsSpec", "Interval", "Role",
    "allocate", "parse_spec", "simulate",
]
