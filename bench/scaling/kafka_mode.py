"""``--through-kafka``: Berth's run of a trace through the real services, compared with the pure
simulation's.

The bench is the gateway. It serves the trace's requests with the same simulated replicas as the
pure run (:mod:`bench.scaling.sim`), in real time — one simulated second per wall-clock second, the
trace's clock being compressed by ``--speed`` already — and every 5 s publishes the pool's
``QueueLagObserved`` (the documented producer contract, :class:`berth.client.BerthClient`) to Kafka.
The token-lag service folds the reports, the decision service's pool cell decides, the binder
applies its ``ScalePool`` to the cluster simulator (``berth binder run --backend sim`` against
``berth cluster-sim``, whose nodes are the bench's 4 on-demand + 4 spot 8-GPU nodes). The bench reads
the ``ScalePool`` commands back from the commands topic and its replicas follow them: nothing
of the policy runs in the bench.

The services run as processes (:class:`berth_dev.supervisor.Supervisor`) on the broker named by
``BERTH_KAFKA_BOOTSTRAP`` (which must hold no other Berth run with the same ``BERTH_KAFKA__TOPIC_PREFIX``
and ``BERTH_KAFKA__GROUP_PREFIX``: give each run prefixes of its own on a shared broker), or on a
broker of the bench's own (:func:`berth_dev.devstack.scratch.empty_kafka`) when unset.

Compared: the replica count asked for, second by second. A report at second ``t`` is decided
in the pure run at ``t``; through Kafka the answer arrives ``latency`` later (publish, fold,
decide, commit, read back: the batching delay), so the Kafka timeline may lag by that much; the
comparison says for how many seconds the two counts differ and whether every difference lies
within ``tolerance_s`` of a change of the pure timeline.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime, timedelta
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from .berth import NAMESPACE, POOL, BerthPolicy, agent_pool_spec
from .policies import CapacityClass, PoolView, Scale, SpotNoticeView
from .runner import Scenario
from .sim import RunResult, _Run

REPORT_INTERVAL_S = 5.0


class _Bus:
    """A thread with an event loop: publishes reports, reads ScalePool commands back."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.loop = asyncio.new_event_loop()
        self.latest: int | None = None
        self.commands: list[tuple[float, int, int, str]] = []
        """(wall-clock seconds since the run began, previous, replicas, reason) as read back."""
        self.started_at = time.monotonic()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._client: Any = None
        self._thread = threading.Thread(target=self._main, name="bench-kafka", daemon=True)

    def __enter__(self) -> _Bus:
        self._thread.start()
        if not self._ready.wait(60):
            raise RuntimeError("the bench's Kafka client did not start within 60 s")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def _main(self) -> None:
        self.loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        from berth.schemas import ScalePool
        from berth.schemas.topics import COMMANDS

        from berth.bus import EventConsumer
        from berth.client import BerthClient
        from berth.settings import load_settings

        self._stop = asyncio.Event()
        settings = load_settings(kafka=self.bootstrap).kafka
        async with (
            BerthClient(settings, source="gateway/bench-scaling") as client,
            EventConsumer(settings, [COMMANDS], group_id=None, name="bench-scaling") as consumer,
        ):
            self._client = client
            self._ready.set()

            async def read() -> None:
                async for item in consumer.events():
                    event = item.event
                    if isinstance(event, ScalePool) and event.pool == POOL and event.namespace == NAMESPACE:
                        self.commands.append(
                            (time.monotonic() - self.started_at, event.previous_replicas, event.replicas, event.reason)
                        )
                        self.latest = event.replicas

            reader = asyncio.create_task(read())
            await self._stop.wait()
            reader.cancel()

    def publish(self, event: Any) -> None:
        asyncio.run_coroutine_threadsafe(self._client.publish(event), self.loop)


class KafkaBerth:
    """The gateway's side of Berth: reports out, the commands' replica count in."""

    name = "berth (kafka)"

    def __init__(self, scene: Scenario, bus: _Bus, anchor: datetime) -> None:
        self.reporter = BerthPolicy(scene.config.pool, report_interval_s=REPORT_INTERVAL_S)
        self.bus = bus
        self.anchor = anchor
        self._next_report = REPORT_INTERVAL_S
        self.reports = 0
        self.published: list[float] = []
        """Wall seconds since the replay began at which each report was sent."""

    def decide(self, view: PoolView) -> Scale | None:
        if view.now >= self._next_report:
            self._next_report += REPORT_INTERVAL_S
            observed = self.reporter.observe(view)
            self.bus.publish(observed.model_copy(update={"observed_at": self.anchor + timedelta(seconds=view.now)}))
            self.reports += 1
            self.published.append(time.monotonic() - self.bus.started_at)
        latest = self.bus.latest
        return Scale(latest) if latest is not None and latest != view.target else None

    def on_spot_notice(self, notice: SpotNoticeView, view: PoolView) -> tuple[CapacityClass, ...]:
        return ()


def cluster_documents(scene: Scenario, cells: int) -> list[dict[str, Any]]:
    """The cluster simulator's workload: the bench's nodes, in the pool's cell, and its AgentPool."""
    from berth.schemas.cells import cell_of_pool
    from berth_dev.workloads.generate import H100, gpu_node_manifest

    shape = scene.config.cluster
    labels = {"berth.io/cell": str(cell_of_pool(NAMESPACE, POOL, cells))}
    nodes = [
        gpu_node_manifest(f"od-{i}", H100, zone="us-east-1a", extra_labels=labels) for i in range(shape.on_demand_nodes)
    ]
    nodes += [
        gpu_node_manifest(f"spot-{i}", H100, zone="us-east-1a", spot=True, extra_labels=labels)
        for i in range(shape.spot_nodes)
    ]
    spec = agent_pool_spec(scene.config.pool)
    pool = {
        "apiVersion": "berth.io/v1alpha1",
        "kind": "AgentPool",
        "metadata": {"name": POOL, "namespace": NAMESPACE},
        "spec": spec,
    }
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}, *nodes, pool]


@contextmanager
def berth_services(scene: Scenario, workdir: Path, bootstrap: str, log: Any = None) -> Iterator[Any]:
    """inventory, token-lag, decision, binder (sim backend) and cluster-sim as processes, with the
    nodes routed to the pool's cell; yields the Supervisor."""
    from berth.schemas.topics import DECISION_INPUTS
    from berth_dev.devstack.procs import free_ports
    from berth_dev.supervisor import Supervisor
    from berth_dev.workloads import from_documents, write_documents, write_pools_file

    from berth.bus import ensure_topics
    from berth.settings import BerthSettings

    env = {"BERTH_KAFKA_BOOTSTRAP": bootstrap, "BERTH_LOG_LEVEL": "info"}
    os.environ["BERTH_KAFKA_BOOTSTRAP"] = bootstrap
    asyncio.run(ensure_topics(BerthSettings().kafka))
    documents = cluster_documents(scene, DECISION_INPUTS.partitions)
    workload, pools = workdir / "workload.yaml", workdir / "pools.yaml"
    write_documents(documents, workload)
    write_pools_file(from_documents(documents, name="pools"), pools)
    [sim_port] = free_ports(1)
    with Supervisor(workdir / "logs", env) as services:
        services.start("inventory", ["run", "--data-dir", str(workdir / "inventory")])
        services.start("token-lag", ["run", "--pools", str(pools)])
        services.start("decision", ["run", "--pools", str(pools)])
        services.start("binder", ["run", "--backend", "sim", "--sim-url", f"http://127.0.0.1:{sim_port}"])
        services.start(
            "cluster-sim",
            ["run", "--workload", str(workload), "--speed", "1", "--port", str(sim_port), "--no-progress"],
        )
        routed = workdir / "logs" / "inventory.log"
        nodes = scene.config.cluster.on_demand_nodes + scene.config.cluster.spot_nodes
        deadline = time.monotonic() + 180
        while not (routed.exists() and routed.read_text().count('"node routed"') >= nodes):
            services.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster's nodes were not routed to the pool's cell within 180 s")
            time.sleep(0.5)
        if log is not None:
            log(f"[bench.scaling] services up, {nodes} nodes routed to the pool's cell")
        yield services


def replay(scene: Scenario, bus: _Bus, *, log: Any = None) -> tuple[RunResult, list[float]]:
    """The trace served in real time, Berth's replicas following the commands read back."""
    anchor = datetime.now(UTC).replace(microsecond=0)
    policy = KafkaBerth(scene, bus, anchor)
    run = _Run(scene.workload, policy, scene.interruptions, scene.config, None)
    started = time.monotonic()
    bus.started_at = started
    duration = scene.workload.shape.duration_s
    for t in range(duration):
        run.step(t)
        if log is not None and (t + 1) % 60 == 0:
            log(
                f"[bench.scaling] through Kafka: minute {(t + 1) // 60} of {duration // 60}, "
                f"{run.base_target} replicas asked for, {len(bus.commands)} ScalePool read back"
            )
        delay = started + (t + 1) - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    result = run.result()
    result.policy = policy.name
    return result, policy.published


def compare(pure: list[int], kafka: list[int], tolerance_s: float) -> dict[str, Any]:
    """Second by second: where the counts differ, and whether each difference is within
    ``tolerance_s`` of a second at which the pure timeline had the Kafka count."""
    n = min(len(pure), len(kafka))
    differing = [t for t in range(n) if pure[t] != kafka[t]]
    tol = int(tolerance_s)
    outside = [t for t in differing if kafka[t] not in pure[max(0, t - tol) : t + tol + 1]]
    return {
        "seconds": n,
        "seconds_differing": len(differing),
        "seconds_outside_tolerance": len(outside),
        "first_outside": outside[:5],
        "tolerance_s": tolerance_s,
        "matches": not outside,
    }


def changes(timeline: list[int]) -> list[tuple[int, int]]:
    out = []
    for t, v in enumerate(timeline):
        if t == 0 or v != timeline[t - 1]:
            out.append((t, v))
    return out


def run_through_kafka(
    scene: Scenario,
    setup: Any,
    pure: RunResult | None,
    *,
    err: Any,
    plot_dir: Path | None = None,
    tolerance_s: float | None = None,
    workdir: Path | None = None,
) -> dict[str, Any]:
    """Start the services, replay, compare with the pure run's Berth timeline (``pure``)."""
    if pure is None:
        raise SystemExit("error: --through-kafka compares with the pure berth run: keep berth in --policies")
    bootstrap = os.environ.get("BERTH_KAFKA_BOOTSTRAP")
    log = (lambda text: err.print(text)) if err is not None else None
    own = None
    if not bootstrap:
        from berth_dev.devstack.scratch import empty_kafka

        own = empty_kafka()
    with (
        own if own is not None else nullcontext(bootstrap) as broker,
        nullcontext(workdir) if workdir is not None else TemporaryDirectory(prefix="bench-scaling-") as tmp,
    ):
        assert broker is not None
        with berth_services(scene, Path(tmp), broker, log), _Bus(broker) as bus:
            # The cell has seen the pool's initial replicas when the first command arrives.
            result, published = replay(scene, bus, log=log)
            reports = len(published)
            time.sleep(2.0)
            commands = list(bus.commands)
    answered = [c for c in commands]
    latency = _latencies(published, commands)
    tol = tolerance_s if tolerance_s is not None else REPORT_INTERVAL_S + max(latency, default=0.0) + 1.0
    comparison = compare(pure.second_target, result.second_target, tol)
    comparison.update(
        {
            "reports_published": reports,
            "scale_pool_read_back": len(answered),
            "latency_s_max": round(max(latency, default=0.0), 2),
            "pure_changes": changes(pure.second_target),
            "kafka_changes": changes(result.second_target),
            "kafka": {
                "slo_violation_minutes": result.slo_violation_minutes,
                "gpu_hours": round(result.gpu_hours, 2),
                "ttft_p99_s": round(result.ttft_p99_s, 3),
                "scale_events": result.scale_events,
            },
            "pure": {
                "slo_violation_minutes": pure.slo_violation_minutes,
                "gpu_hours": round(pure.gpu_hours, 2),
                "ttft_p99_s": round(pure.ttft_p99_s, 3),
                "scale_events": pure.scale_events,
            },
        }
    )
    if log is not None:
        log(
            f"[bench.scaling] through Kafka: {reports} reports, {len(answered)} ScalePool; replicas asked for "
            f"differ from the pure run's in {comparison['seconds_differing']} of {comparison['seconds']} s, "
            f"{comparison['seconds_outside_tolerance']} outside ±{tol:.0f} s; pure {comparison['pure_changes']}, "
            f"kafka {comparison['kafka_changes']}"
        )
    if plot_dir is not None:
        from .plots import plot_kafka

        plot_kafka(pure, result, plot_dir / "kafka.png", tol)
    return comparison


def _latencies(published: list[float], commands: list[tuple[float, int, int, str]]) -> list[float]:
    """Wall seconds (= simulated seconds) from the report that asked for a count to its command
    read back: each command's arrival minus the last report sent before it."""
    import bisect

    out = []
    for at, _, _, _ in commands:
        i = bisect.bisect_right(published, at)
        if i:
            out.append(at - published[i - 1])
    return out
