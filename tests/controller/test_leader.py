"""Leader election against the emulator's Lease API, on fake clocks.

Single steps (``try_acquire_or_renew``) check the rules one at a time; ``run`` in threads checks
the loop. The clocks are fake and each sleep advances them, so a 15 s lease takes milliseconds.
"""

from __future__ import annotations

import abc
import datetime as dt
import re
import threading
import time
from collections.abc import Iterator
from typing import Any, Self

import pytest
from kubernetes import client

from advisor.controller.kube.client import Kube
from advisor.controller.app import Controller
from advisor.controller.kube.leader import LeaderElector, micro_time
from advisor.controller.settings import SettingsError, load_settings
from tests.controller.harness import wait_for
from tests.kube_emulator import KubeEmulator

MICROTIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


class FakeClock:
    """Epoch seconds that move only when told to (or when an elector sleeps)."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.t, self.lock = start, threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            return self.t

    def advance(self, seconds: float) -> None:
        with self.lock:
            self.t += seconds

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)
        time.sleep(0.001)  # let the other threads run


class ScaledClock(FakeClock):
    """Real time, ``scale`` times faster, for every thread alike. Why: with ``FakeClock`` only
    sleeps move time, so a leader whose thread is starved (a loaded machine) sees none pass while
    a standby's sleeps move the shared clock past the lease: a split brain no real clock allows."""

    def __init__(self, scale: float = 20.0) -> None:
        super().__init__()
        self.scale, self.t0 = scale, time.monotonic()

    def __call__(self) -> float:
        return self.t + (time.monotonic() - self.t0) * self.scale

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds / self.scale)


@pytest.fixture
def emu() -> Iterator[KubeEmulator]:
    with KubeEmulator(namespaces=["advisor"]) as server:
        yield server


@pytest.fixture
def kube(emu: KubeEmulator) -> Kube:
    return Kube(client.ApiClient(emu.configuration()), request_timeout_s=5)


def elector(kube: Any, identity: str, clock: FakeClock, **kwargs: Any) -> LeaderElector:
    return LeaderElector(kube, "advisor", "advisor-controller", identity, lease_duration_s=15, renew_deadline_s=10,
                         retry_period_s=2, clock=clock, sleep=clock.sleep, **kwargs)


def lease(emu: KubeEmulator) -> dict[str, Any]:
    found = emu.get("leases", "advisor", "advisor-controller")
    assert found is not None
    return found["spec"]


def test_first_candidate_creates_the_lease_and_the_second_waits(emu: KubeEmulator, kube: Kube) -> None:
    clock = FakeClock()
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    spec = lease(emu)
    assert spec["holderIdentity"] == "a" and spec["leaseDurationSeconds"] == 15 and spec["leaseTransitions"] == 0
    assert MICROTIME.match(spec["renewTime"]) and MICROTIME.match(spec["acquireTime"])
    assert micro_time(1_700_000_000.0) == "2023-11-14T22:13:20.000000Z"  # a whole second keeps its six zeros


def test_takeover_after_release_is_immediate(emu: KubeEmulator, kube: Kube) -> None:
    clock = FakeClock()
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    assert a.release()
    assert lease(emu)["holderIdentity"] == ""
    assert b.try_acquire_or_renew()  # no waiting: an empty holder is free (client-go)
    assert lease(emu)["holderIdentity"] == "b" and lease(emu)["leaseTransitions"] == 1


def test_takeover_after_the_leader_dies_waits_one_lease_duration(emu: KubeEmulator, kube: Kube) -> None:
    clock = FakeClock()
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    assert a.try_acquire_or_renew()  # then a "crashes": it never renews nor releases
    assert not b.try_acquire_or_renew()  # b sees the record for the first time at t0
    clock.advance(14.9)
    assert not b.try_acquire_or_renew()  # 14.9 s unchanged < 15 s lease: still a's
    clock.advance(0.2)
    assert b.try_acquire_or_renew()  # unchanged for 15.1 s since b first saw it: expired
    spec = lease(emu)
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew() and not a.is_leader()  # a, back, finds b's fresh lease


def test_expiry_is_judged_on_the_candidates_own_clock(emu: KubeEmulator, kube: Kube) -> None:
    a = elector(kube, "a", FakeClock(1_700_000_000.0))
    b = elector(kube, "b", FakeClock(1_700_000_000.0 + 3600))  # b's clock runs an hour ahead
    assert a.try_acquire_or_renew()
    # by renewTime, a's lease looks an hour dead to b; client-go compares observation times instead,
    # so skew cannot steal a live lease
    assert not b.try_acquire_or_renew()


def test_losing_a_write_race_is_not_an_error(emu: KubeEmulator, kube: Kube) -> None:
    clock = FakeClock()
    a = elector(kube, "a", clock)
    assert a.try_acquire_or_renew() and a.release()

    class RacingKube:
        """b's kube: just before b's write, a re-takes the lease (so b writes a stale resourceVersion)."""

        def get_lease(self, namespace: str, name: str) -> Any:
            return kube.get_lease(namespace, name)

        def create_lease(self, namespace: str, body: Any) -> Any:
            return kube.create_lease(namespace, body)

        def replace_lease(self, namespace: str, name: str, body: Any) -> Any:
            assert a.try_acquire_or_renew()
            return kube.replace_lease(namespace, name, body)

    b_racing = elector(RacingKube(), "b", clock)
    assert b_racing.try_acquire_or_renew() is False  # a 409, reported as "not this time"
    assert lease(emu)["holderIdentity"] == "a"


def test_transitions_count_each_change_of_holder(emu: KubeEmulator, kube: Kube) -> None:
    clock = FakeClock()
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    assert a.try_acquire_or_renew() and a.try_acquire_or_renew()  # a renewal is not a transition
    assert a.release() and b.try_acquire_or_renew()
    assert b.release() and a.try_acquire_or_renew()
    assert lease(emu)["leaseTransitions"] == 2  # a -> b -> a


class ElectorThread(abc.ABC):
    """An elector running in a thread while the ``with`` block lasts; subclasses say what its
    on-started and on-stopped callbacks record."""

    def __init__(self, kube: Any, identity: str, clock: FakeClock, **kwargs: Any) -> None:
        self.elector = elector(kube, identity, clock, on_started_leading=self._on_start,
                               on_stopped_leading=self._on_stop, **kwargs)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.elector.run, args=(self.stop,), daemon=True)

    @abc.abstractmethod
    def _on_start(self) -> None:
        """What the on-started-leading callback records."""

    @abc.abstractmethod
    def _on_stop(self) -> None:
        """What the on-stopped-leading callback records."""

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(3)
        assert not self.thread.is_alive()


class Watched(ElectorThread):
    """Records when (fake time) the elector started and stopped leading."""

    def __init__(self, kube: Any, identity: str, clock: FakeClock, **kwargs: Any) -> None:
        self.clock, self.started, self.stopped = clock, threading.Event(), threading.Event()
        self.started_at = self.stopped_at = 0.0
        super().__init__(kube, identity, clock, **kwargs)

    def _on_start(self) -> None:
        self.started_at = self.clock()
        self.started.set()

    def _on_stop(self) -> None:
        self.stopped_at = self.clock()
        self.stopped.set()


def test_two_running_electors_one_leader_then_handover_on_clean_stop(emu: KubeEmulator, kube: Kube) -> None:
    clock = ScaledClock()
    with Watched(kube, "a", clock) as a:
        assert a.started.wait(3)  # a leads first; then b comes up as a standby
        with Watched(kube, "b", clock) as b:
            time.sleep(1.0)  # both loops run for a while: 20 clock seconds, beyond the 15 s lease
            assert a.elector.is_leader() and not b.elector.is_leader() and not b.started.is_set()
            a.stop.set()
            assert a.stopped.wait(3) and b.started.wait(3)
            # released, so b took over within its retry period (at most 2 s x 2.2 jitter), not 15 s
            assert b.started_at - a.stopped_at < 5.0
            assert lease(emu)["holderIdentity"] == "b"
    assert lease(emu)["holderIdentity"] == ""  # b released on its clean stop too


def test_leader_steps_down_when_renewals_fail(emu: KubeEmulator, kube: Kube) -> None:
    clock = FakeClock()
    with Watched(kube, "a", clock) as a:
        assert a.started.wait(3)
        time.sleep(0.05)
        emu.fail_next(resource="leases", status=500, times=10_000)  # the API server is unreachable
        assert a.stopped.wait(3) and not a.elector.is_leader()
        last_renewal = dt.datetime.strptime(lease(emu)["renewTime"], "%Y-%m-%dT%H:%M:%S.%fZ")
        silent_for = a.stopped_at - last_renewal.replace(tzinfo=dt.timezone.utc).timestamp()
        # attempts come every retry period (2 s); it gives up at the first one >= renew_deadline
        # (10 s) after its last renewal, so within [10, 12) s: before the 15 s lease can expire
        # for a standby, which therefore never overlaps with it
        assert 10.0 <= silent_for < 12.0


def test_leader_steps_down_at_once_when_the_lease_is_taken(emu: KubeEmulator, kube: Kube) -> None:
    clock = FakeClock()
    with Watched(kube, "a", clock) as a:
        assert a.started.wait(3)
        taken_at = clock()
        emu.patch("leases", "advisor", "advisor-controller", {"spec": {"holderIdentity": "intruder"}})
        assert a.stopped.wait(3)
        assert a.stopped_at - taken_at <= 2.0  # at its next attempt (one retry period), not the renew deadline
        assert lease(emu)["holderIdentity"] == "intruder"  # and it did not fight back while it was valid


def test_durations_are_checked() -> None:
    with pytest.raises(ValueError):
        LeaderElector(object(), "ns", "l", "me", lease_duration_s=10, renew_deadline_s=10)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        LeaderElector(object(), "ns", "l", "me", renew_deadline_s=2, retry_period_s=2)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        LeaderElector(object(), "ns", "l", "")  # type: ignore[arg-type]


@pytest.mark.parametrize(("timing", "named"), [
    ({"lease_duration_s": 4, "lease_renew_deadline_s": 4}, "lease_duration_s (4) > lease_renew_deadline_s (4)"),
    ({"lease_renew_deadline_s": 2, "lease_retry_period_s": 2}, "1.2 x lease_retry_period_s (2)"),
    ({"lease_duration_s": 0.5, "lease_renew_deadline_s": 0.4, "lease_retry_period_s": 0.1}, "lease_duration_s"),
])
def test_the_settings_refuse_a_lease_timing_the_elector_cannot_keep(timing: dict[str, float], named: str) -> None:
    with pytest.raises(SettingsError, match=re.escape(named)):
        load_settings(**timing)


def test_the_settings_lease_timing_reaches_the_elector(kube: Kube, tmp_path) -> None:
    settings = load_settings(store_path=tmp_path / "a.db", lease_duration_s=4, lease_renew_deadline_s=3,
                             lease_retry_period_s=0.5)
    elector = Controller(settings, kube).elector
    assert elector is not None
    assert (elector._duration_s, elector._renew_deadline_s, elector._retry_s) == (4, 3, 0.5)



class Flaky(ElectorThread):
    """An elector in a thread whose on-started callback raises while ``fail_start`` is set. It
    records whether the elector said it led in each callback, the terms that started without
    error, and (``holder``) who held the lease when each term had ended."""

    def __init__(self, kube: Any, identity: str, clock: FakeClock, *, fail_start: bool = True,
                 holder: Any = None) -> None:
        self.fail_start, self.holder = fail_start, holder
        self.starts: list[bool] = []  # is_leader() in each on-started call
        self.stops: list[bool] = []  # is_leader() in each on-stopped call
        self.holders: list[str] = []  # holder() in each on-stopped call
        self.good_terms = 0
        super().__init__(kube, identity, clock)

    def _on_start(self) -> None:
        self.starts.append(self.elector.is_leader())
        if self.fail_start:
            raise RuntimeError("the on-started callback failed")
        self.good_terms += 1

    def _on_stop(self) -> None:
        self.stops.append(self.elector.is_leader())
        if self.holder is not None:
            self.holders.append(self.holder())


def test_a_failing_on_started_callback_ends_the_term_and_the_elector_goes_on(emu: KubeEmulator, kube: Kube) -> None:
    with Flaky(kube, "a", FakeClock(), holder=lambda: lease(emu)["holderIdentity"]) as a:
        wait_for("a's term to end", lambda: a.stops, timeout_s=5)  # the term ended: on-stopped ran
        assert a.starts[0] is True and a.stops[0] is False  # it led, then no longer did
        assert a.holders[0] == ""  # and it gave the lease up for another replica
        assert a.thread.is_alive()
        a.fail_start = False
        # it campaigned again
        wait_for("a to lead again", lambda: a.good_terms == 1 and a.elector.is_leader(), timeout_s=5)
        time.sleep(0.05)  # renewals go on (fake seconds pass with each sleep)
        assert a.elector.is_leader() and a.good_terms == 1 and lease(emu)["holderIdentity"] == "a"


def test_a_leader_whose_callback_fails_gives_the_lease_to_a_standby(emu: KubeEmulator, kube: Kube) -> None:
    clock = ScaledClock()
    with Flaky(kube, "a", clock) as a:
        wait_for("a's term to end", lambda: a.stops, timeout_s=5)
        with Flaky(kube, "b", clock, fail_start=False) as b:
            wait_for("b to lead", lambda: b.elector.is_leader(), timeout_s=5)
            time.sleep(0.5)  # 10 clock seconds: a keeps campaigning, but never leads while b does
            assert b.elector.is_leader() and not a.elector.is_leader() and a.thread.is_alive()
            assert b.good_terms == 1 and lease(emu)["holderIdentity"] == "b"


class BrokenRenewals:
    """The Kube adapter, but lease writes raise a non-Kubernetes error while ``broken`` is set."""

    def __init__(self, kube: Kube) -> None:
        self.kube, self.broken = kube, False

    def get_lease(self, namespace: str, name: str) -> Any:
        return self.kube.get_lease(namespace, name)

    def create_lease(self, namespace: str, body: Any) -> Any:
        return self.kube.create_lease(namespace, body)

    def replace_lease(self, namespace: str, name: str, body: Any) -> Any:
        if self.broken:
            raise ValueError("a bug below the Kubernetes client")
        return self.kube.replace_lease(namespace, name, body)


def test_a_renewal_that_raises_something_else_ends_the_term(emu: KubeEmulator, kube: Kube) -> None:
    leases = BrokenRenewals(kube)
    with Flaky(leases, "a", FakeClock(), fail_start=False) as a:
        wait_for("a to lead", lambda: a.elector.is_leader(), timeout_s=5)
        leases.broken = True
        wait_for("a's term to end", lambda: a.stops, timeout_s=5)  # stepped down (its release failed too, quietly)
        assert a.stops == [False] and not a.elector.is_leader() and a.thread.is_alive()
        leases.broken = False
        wait_for("a to lead again", lambda: a.good_terms == 2 and a.elector.is_leader(), timeout_s=5)
