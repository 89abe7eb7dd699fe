"""The engine's observer port: what is timed, with which labels, and that timing changes nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import count

from berth.schemas import PodInfo
from berth.schemas.samples import T0, h100_node
from prometheus_client import REGISTRY

from berth.core.config import default_document
from berth.core.engine import Engine
from berth.metrics import SchedulingMetrics


def _pod(name: str, *, gpus: int, priority: int = 0) -> PodInfo:
    return PodInfo(
        uid=f"uid-{name}",
        namespace="ml",
        name=name,
        scheduler_name="berth",
        priority=priority,
        requests={"cpu": 1000, "memory": 2**30, "nvidia.com/gpu": gpus},
        creation_time=T0,
        tolerations=({"key": "nvidia.com/gpu", "operator": "Exists"},),
    )


@dataclass
class Recorder:
    """An observer with a clock that advances one second per reading."""

    sample_every: int = 1
    ticks: count = field(default_factory=count)
    cycles: int = 0
    points: list[tuple[str, str, str, float]] = field(default_factory=list)
    plugins: list[tuple[str, str, str]] = field(default_factory=list)
    attempts: list[tuple[str, str, str, float]] = field(default_factory=list)
    preemptions: int = 0
    victims: list[int] = field(default_factory=list)

    def clock(self) -> float:
        return float(next(self.ticks))

    def sample_plugins(self) -> bool:
        self.cycles += 1
        return self.cycles % self.sample_every == 0

    def extension_point(self, point: str, status: str, profile: str, seconds: float) -> None:
        self.points.append((point, status, profile, seconds))

    def plugin(self, plugin: str, point: str, status: str, seconds: float) -> None:
        self.plugins.append((plugin, point, status))

    def attempt(self, pod_uid: str, result: str, profile: str, seconds: float) -> None:
        self.attempts.append((pod_uid, result, profile, seconds))

    def preemption_attempt(self) -> None:
        self.preemptions += 1

    def preemption_victims(self, victims: int) -> None:
        self.victims.append(victims)


def _engine(observer: Recorder | None) -> Engine:
    engine = Engine(default_document())
    for i in range(2):
        engine.upsert_node(h100_node(f"gpu-{i}"))
    engine.observe(observer)
    return engine


def _run(engine: Engine) -> list[tuple[str, ...]]:
    pods = [_pod("a", gpus=8), _pod("b", gpus=8), _pod("big", gpus=16), _pod("urgent", gpus=8, priority=100)]
    return [tuple(p.node for p in engine.schedule(pod).placements) for pod in pods]


def test_every_attempt_is_timed_per_pod_with_its_result_and_preemption_is_counted():
    observer = Recorder()
    placed = _run(_engine(observer))
    assert [a[:3] for a in observer.attempts] == [
        ("uid-a", "scheduled", "berth"),
        ("uid-b", "scheduled", "berth"),
        ("uid-big", "unschedulable", "berth"),
        ("uid-urgent", "scheduled", "berth"),
    ]
    assert all(a[3] > 0 for a in observer.attempts)
    assert placed[3] and observer.victims == [1]
    assert observer.preemptions == 2  # big (no victim helps) and urgent
    points = {(p[0], p[1]) for p in observer.points}
    assert {
        ("PreFilter", "Success"),
        ("PreScore", "Success"),
        ("Score", "Success"),
        ("Reserve", "Success"),
        ("Permit", "Success"),
        ("PostFilter", "Unschedulable"),
        ("PostFilter", "Success"),
    } <= points
    assert ("NodeResourcesFit", "Filter", "Unschedulable") in observer.plugins
    assert ("DefaultPreemption", "PostFilter", "Success") in observer.plugins


def test_plugins_are_timed_only_in_sampled_cycles():
    every = Recorder(sample_every=1)
    _run(_engine(every))
    none = Recorder(sample_every=10**6)
    _run(_engine(none))
    assert every.plugins and not none.plugins
    assert len(none.points) == len(every.points)


def test_timing_changes_no_decision_and_probes_are_not_attempts():
    observer = Recorder()
    timed, untimed = _engine(observer), _engine(None)
    assert _run(timed) == _run(untimed)
    assert timed.snapshot_hash() == untimed.snapshot_hash()
    before = len(observer.attempts), len(observer.points)
    timed.probe([_pod("probe", gpus=1)])
    assert (len(observer.attempts), len(observer.points)) == before


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_the_sli_runs_from_the_first_attempt_and_is_labelled_with_the_attempts():
    metrics = SchedulingMetrics()
    now = iter([10.0, 12.0, 15.5])
    metrics.clock = lambda: next(now)
    before = _sample("scheduler_pod_scheduling_sli_duration_seconds_count", attempts="3")
    total = _sample("scheduler_pod_scheduling_sli_duration_seconds_sum", attempts="3")
    metrics.attempt("uid-x", "unschedulable", "berth", 0.5)  # first attempt began at 9.5
    metrics.attempt("uid-x", "unschedulable", "berth", 0.5)
    metrics.attempt("uid-x", "scheduled", "berth", 0.5)
    assert _sample("scheduler_pod_scheduling_sli_duration_seconds_count", attempts="3") == before + 1
    assert _sample("scheduler_pod_scheduling_sli_duration_seconds_sum", attempts="3") == total + 6.0


def test_plugin_sampling_takes_one_cycle_in_ten_starting_with_the_first():
    metrics = SchedulingMetrics()
    assert [metrics.sample_plugins() for _ in range(21)] == [i % 10 == 0 for i in range(21)]
