"""``advisor allocate JOBS.yaml``: share a capacity between jobs, from each job's predicted curve.

Each job's curve is predicted as ``advisor predict`` predicts it (the default model for its
profile's kind, the shipped model error widening the intervals, an adaptive run per W); the
allocation is ``core/allocation.py``. Paths are relative to the file.

JOBS.yaml::

    capacity: 16                        # workers; or {workers: 16, resources: {cpu: 64, nvidia.com/gpu: 8}}
    prices: {worker_per_hour: 1, ps_per_hour: 1}   # optional (default 1 and 0, as advisor predict)
    jobs:
      - name: a
        profile: path/to/profile.json.gz
        bandwidth: 100Mbit/s            # optional: else recorded in the profile, else measured
        min_workers: 1                  # optional (default 1)
        max_workers: 8                  # optional; the curve is predicted for 1..max_workers (else 1..16)
        priority: 1                     # optional (default 1), weighs the job's gain
        examples: 2e6                   # optional: examples left, with
        deadline_hours: 4               #   a deadline to finish them by
        request: {cpu: "2", memory: 4Gi}   # optional: per worker pod, counted against capacity resources
        overhead: {cpu: "1"}            # optional: the job's other pods (PS), once per job
        batch_size: 32                  # optional: when the trace does not say
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from advisor import cli_output
from advisor.cli_args import SEED, int_at_least
from advisor.core.advice import DEFAULT_GOODPUT, Advice, AdviceRequest, ModelChoice, advise
from advisor.core.allocation import Allocation, Capacity, CurvePoint, JobDemand, allocate
from advisor.core.bandwidth import resolve_bandwidth
from advisor.core.cost import Constraints, Prices
from advisor.core.curve import CurveSettings
from advisor.core.models.registry import default_model_for
from advisor.core.sim_types import NetworkModel
from advisor.core.units import parse_bandwidth, parse_quantity
from advisor.errors import AdvisorError
from advisor.file_fields import Quantity, Rate, load_yaml
from advisor.importers.loader import load_profile
from advisor.importers.model_error_file import load_model_errors
from advisor.parallel import PointPool

JSON_SCHEMA = "advisor-allocation/1"
DEFAULT_CURVE_END = 16  # the curve's last W when a job sets no max_workers (as advisor predict)
TARGET = 0.02  # an adaptive run's relative half-width (as advisor predict)


class AllocateFileError(AdvisorError, ValueError):
    """The JOBS file cannot be read or names a profile that is not there; the message says where."""


class _Capacity(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workers: int | None = Field(default=None, ge=0)
    resources: dict[str, Quantity] = Field(default_factory=dict)


class _Prices(BaseModel):
    model_config = ConfigDict(extra="forbid")

    worker_per_hour: float = Field(default=1.0, ge=0)
    ps_per_hour: float = Field(default=0.0, ge=0)


class _Job(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    profile: Path
    bandwidth: Rate | None = None
    min_workers: int = Field(default=1, ge=1)
    max_workers: int | None = Field(default=None, ge=1)
    priority: float = Field(default=1.0, gt=0)
    examples: float | None = Field(default=None, gt=0)
    deadline_hours: float | None = Field(default=None, gt=0)
    request: dict[str, Quantity] = Field(default_factory=dict)
    overhead: dict[str, Quantity] = Field(default_factory=dict)
    batch_size: int | None = Field(default=None, gt=0)


class JobsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    capacity: _Capacity | None = None
    prices: _Prices = _Prices()
    jobs: list[_Job] = Field(min_length=1)

    @field_validator("capacity", mode="before")
    @classmethod
    def _workers(cls, v: Any) -> Any:
        """``capacity: 16`` is ``capacity: {workers: 16}``."""
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if v < 0:
                raise ValueError(f"must be >= 0 workers, got {v}")
            return {"workers": v}
        return v


def add_parser(commands: Any) -> None:
    """Register ``allocate`` on the CLI's subcommands."""
    cmd = commands.add_parser("allocate", help="share a capacity of workers between jobs (see docs/allocation.md)")
    cmd.add_argument("jobs_file", type=Path, metavar="JOBS.yaml", help="the jobs and the capacity (format: "
                                                                       "docs/allocation.md)")
    cmd.add_argument("--capacity", type=int_at_least(0), metavar="N", help="workers in all (overrides the file's)")
    cmd.add_argument("--seed", type=SEED, default=0, help="random seed of the simulations (default 0)")
    cmd.add_argument("--jobs", type=int_at_least(0, "0 is as many as the CPU quota allows"), default=0, metavar="N",
                     help="processes that compute the curves (default 0: as many as the CPU quota allows)")
    cmd.add_argument("--json", action="store_true", help=f"print the allocation as JSON ({JSON_SCHEMA})")
    cmd.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    doc = read_jobs_file(args.jobs_file)
    capacity = _capacity(doc, args.capacity)
    base = args.jobs_file.parent
    for i, job in enumerate(doc.jobs):  # every path checked before the first simulation
        if not (base / job.profile).exists():
            raise AllocateFileError(f"{args.jobs_file}: jobs[{i}] ({job.name}): no profile at {base / job.profile}")
    prices = Prices(doc.prices.worker_per_hour, doc.prices.ps_per_hour)
    demands, curves = [], {}
    with PointPool(args.jobs) as pool, cli_output.progress("predicted", "jobs") as progress:
        for i, job in enumerate(doc.jobs):
            cli_output.detail("predicting %s (%d/%d)", job.name, i + 1, len(doc.jobs))
            advice = predict(job, base, prices, args.seed, pool)
            curves[job.name] = advice
            demands.append(demand(job, advice, prices))
            if progress is not None:
                progress(i + 1, len(doc.jobs))
    result = allocate(demands, capacity)
    print(json.dumps(allocation_to_json(result, curves), indent=2) if args.json else allocation_table(result))
    return 0


def read_jobs_file(path: Path) -> JobsFile:
    """The file, validated; one line naming the place of any problem."""
    raw = load_yaml(path, AllocateFileError)
    try:
        return JobsFile.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'top level'}: {_message(e)}"
                             for e in exc.errors())
        raise AllocateFileError(f"{path}: {problems}") from None


def _message(error: Any) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown key"
    return str(error["msg"]).removeprefix("Value error, ")


def _capacity(doc: JobsFile, override: int | None) -> Capacity:
    given = doc.capacity or _Capacity()
    resources = {k: parse_quantity(v) for k, v in given.resources.items()}
    return Capacity(override if override is not None else given.workers, resources)


def predict(job: _Job, base: Path, prices: Prices, seed: int, pool: PointPool) -> Advice:
    """The job's curve as ``advisor predict`` gives it with default settings."""
    profile = load_profile(base / job.profile, batch_size=job.batch_size)
    given = parse_bandwidth(job.bandwidth) if job.bandwidth else None
    bandwidth, _, _ = resolve_bandwidth(profile, given, DEFAULT_GOODPUT)
    end = max(job.max_workers or DEFAULT_CURVE_END, job.min_workers)
    request = AdviceRequest(
        network=NetworkModel(bandwidth_bps=bandwidth),
        curve=CurveSettings(workers=tuple(range(1, end + 1)), seed=seed, target_rel_halfwidth=TARGET),
        prices=prices,
        constraints=Constraints(max_workers=job.max_workers),  # the deadline is the allocator's to weigh
        model=ModelChoice(default_model_for(profile.job.kind.allreduce, profile.job.synchronous)),
        model_error=load_model_errors(None),
    )
    return advise(profile, request, None, pool)


def demand(job: _Job, advice: Advice, prices: Prices) -> JobDemand:
    """The job as the allocator sees it."""
    return JobDemand(
        name=job.name,
        curve=tuple(CurvePoint(p.workers, p.throughput, p.low, p.high) for p in advice.points),
        priority=job.priority, min_workers=job.min_workers, max_workers=job.max_workers,
        deadline_hours=job.deadline_hours, examples=job.examples,
        request={k: parse_quantity(v) for k, v in job.request.items()},
        overhead={k: parse_quantity(v) for k, v in job.overhead.items()},
        prices=prices, parameter_servers=advice.parameter_servers,
    )


def allocation_to_json(result: Allocation, curves: dict[str, Advice] | None = None) -> dict[str, Any]:
    return {
        "schema": JSON_SCHEMA,
        "capacity": {"workers": result.capacity.workers, "resources": dict(result.capacity.resources)},
        "used": dict(result.used),
        "goodput": result.goodput,
        "allocations": [
            {"name": a.name, "workers": a.workers, "status": a.status.value, "own_optimum": a.own_optimum,
             "throughput": a.throughput, "reason": a.reason,
             **({"curve": [{"workers": p.workers, "throughput": p.throughput, "low": p.low, "high": p.high}
                           for p in curves[a.name].points]} if curves and a.name in curves else {})}
            for a in result.jobs
        ],
    }


def allocation_table(result: Allocation) -> str:
    cap = result.capacity
    limit = "unlimited" if cap.workers is None else str(cap.workers)
    lines = [f"capacity: {limit} workers" + "".join(f", {v:g} {k}" for k, v in sorted(cap.resources.items()))
             + f"; used {result.used.get('workers', 0):g} workers",
             "", f"  {'job':<16} {'workers':>7} {'alone':>5}  {'examples/s':>10}  {'status':<9}  why"]
    for a in result.jobs:
        alone = "-" if a.own_optimum is None else str(a.own_optimum)
        thr = f"{a.throughput:,.1f}" if a.throughput else "-"
        lines.append(f"  {a.name:<16} {a.workers:>7} {alone:>5}  {thr:>10}  {a.status.value:<9}  {a.reason}")
    lines += ["", "alone: the job's own cost-optimal W (what it gets with room for everyone)"]
    return "\n".join(lines)
