"""The curve over a process pool (advisor/parallel.py): the pool's size from the CPU quota, the
same curve for any pool size, and no point lost when a worker process dies."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from advisor.cli import main
from advisor.core.advice import AdviceRequest, advise
from advisor.core.curve import CurveSettings, PointTask, compute_point, predict_curve
from advisor.core.models import registry
from advisor.core.models.protocol import ModelInputs
from advisor.core.sim_types import NetworkModel
from advisor.parallel import ParallelError, PointPool, available_cpus, cpu_quota, resolve_jobs
from benchmarks.synthetic import tiny_mlp


def _cgroup(tmp_path: Path, v2: str | None = None, v1: tuple[str, str] | None = None) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    if v2 is not None:
        (tmp_path / "cpu.max").write_text(v2 + "\n")
    if v1 is not None:
        (tmp_path / "cpu").mkdir()
        (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text(v1[0] + "\n")
        (tmp_path / "cpu" / "cpu.cfs_period_us").write_text(v1[1] + "\n")
    return tmp_path


def test_cpu_quota_reads_cgroup_v2_and_v1(tmp_path: Path) -> None:
    assert cpu_quota(_cgroup(tmp_path / "a", v2="150000 100000")) == 1.5  # 150 ms of CPU per 100 ms
    assert cpu_quota(_cgroup(tmp_path / "b", v2="max 100000")) is None  # no limit
    assert cpu_quota(_cgroup(tmp_path / "c", v1=("200000", "100000"))) == 2.0
    assert cpu_quota(_cgroup(tmp_path / "d", v1=("-1", "100000"))) is None  # v1's "no limit"
    assert cpu_quota(tmp_path / "none") is None  # no cgroup file at all


@pytest.mark.parametrize(("quota", "affinity", "expected"), [
    ("150000 100000", 4, 2),  # 1.5 CPUs rounds up to 2 processes sharing them
    ("50000 100000", 4, 1),  # half a CPU: still one process
    ("400000 100000", 2, 2),  # the affinity caps a larger quota
    ("max 100000", 3, 3),  # no quota: the affinity
    ("200000 100000", 8, 2),
])
def test_available_cpus_is_the_affinity_capped_by_the_quota(tmp_path: Path, quota: str, affinity: int,
                                                             expected: int) -> None:
    root = _cgroup(tmp_path, v2=quota)
    assert available_cpus(root, affinity) == expected
    assert resolve_jobs(0, root, affinity) == expected  # 0 = auto
    assert resolve_jobs(5, root, affinity) == 5  # asked for: as asked


def test_real_machine_gives_at_least_one_process() -> None:
    assert 1 <= available_cpus() <= len(os.sched_getaffinity(0))


@pytest.mark.parametrize("jobs", [-1, 1.5, "2", True])
def test_a_pool_size_that_cannot_work_is_refused(jobs: object) -> None:
    with pytest.raises(ParallelError, match="--jobs must be a whole number >= 0"):
        resolve_jobs(jobs)  # type: ignore[arg-type]


def test_cli_refuses_a_negative_jobs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["predict", "--jobs", "-1", "--workers", "1-2"])
    assert exc.value.code == 2
    assert "--jobs: must be >= 0" in capsys.readouterr().err


def _request(workers: tuple[int, ...] = (1, 2, 3, 5)) -> AdviceRequest:
    cfg = CurveSettings(workers=workers, steps=120, warmup_steps=20, seed=3)
    return AdviceRequest(network=NetworkModel(bandwidth_bps=100e6), curve=cfg)


def test_the_curve_is_the_same_for_one_and_two_processes() -> None:
    """Each W point is seeded on its own, so the pool size cannot change a single number."""
    profile = tiny_mlp()
    with PointPool(1) as one:
        a = advise(profile, _request(), mapper=one)
    with PointPool(2) as two:
        b = advise(profile, _request(), mapper=two)
    assert a.points == b.points
    assert [p.workers for p in b.points] == [1, 2, 3, 5]
    c = advise(profile, _request())  # and without any mapper
    assert c.points == a.points


def test_adaptive_curve_is_the_same_for_any_pool_size() -> None:
    model = registry.get("li2020-des+contention")
    params = registry.params_for(model)
    profile = tiny_mlp()
    inputs = ModelInputs(profile=profile, recorded=profile, network=NetworkModel(bandwidth_bps=100e6))
    cfg = CurveSettings(workers=(1, 2, 4), warmup_steps=20, min_steps=60, max_steps=400, target_rel_halfwidth=0.02)
    done: list[tuple[int, int]] = []
    with PointPool(2) as pool:
        pooled = predict_curve(model, inputs, params, cfg, lambda d, n: done.append((d, n)), pool)
    assert pooled == predict_curve(model, inputs, params, cfg)
    assert done == [(1, 3), (2, 3), (3, 3)]  # progress once per point, in curve order


def _die_once(task: PointTask) -> object:
    """Kills its worker process the first time it sees W = 2 (a marker file remembers)."""
    marker = Path(os.environ["ADVISOR_TEST_MARKER"])
    if task.workers == 2 and not marker.exists():
        marker.write_text("died")
        os._exit(9)
    return compute_point(task)


def _die_always(task: PointTask) -> object:
    if task.workers == 2:
        os._exit(9)
    return compute_point(task)


def _tasks() -> list[PointTask]:
    model = registry.get("li2020-des")
    profile = tiny_mlp()
    inputs = ModelInputs(profile=profile, recorded=profile, network=NetworkModel(bandwidth_bps=100e6))
    cfg = CurveSettings(workers=(1, 2, 3), steps=60, warmup_steps=10)
    return [PointTask(model.name, inputs, registry.params_for(model), w, cfg) for w in cfg.workers]


def test_a_worker_that_dies_once_loses_no_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADVISOR_TEST_MARKER", str(tmp_path / "marker"))
    tasks = _tasks()
    with PointPool(2) as pool:
        points = list(pool(_die_once, tasks))
    assert (tmp_path / "marker").exists()  # it did die
    assert points == [compute_point(t) for t in tasks]


def test_a_worker_that_dies_twice_is_reported_by_point() -> None:
    # W = 2 kills its process every time; W = 3, in the pool beside it, is lost too when it was
    # still running as the pool broke (a race), W = 1 never (the caller computes the cheapest point)
    with PointPool(2) as pool, pytest.raises(ParallelError, match=r"died twice .*points \[(3, )?2\]"):
        list(pool(_die_always, _tasks()))


def _refuse(task: PointTask) -> object:
    from advisor.core.sim_types import SimulationSettingsError

    if task.workers == 1:  # the cheapest point runs in the parent (fork): the others in the pool's processes
        return compute_point(task)
    raise SimulationSettingsError(f"cannot simulate W = {task.workers}")


def test_an_error_in_a_worker_process_reaches_the_caller_as_itself() -> None:
    from advisor.core.sim_types import SimulationSettingsError

    with PointPool(2) as pool, pytest.raises(SimulationSettingsError, match=r"cannot simulate W = [23]"):
        list(pool(_refuse, _tasks()))
