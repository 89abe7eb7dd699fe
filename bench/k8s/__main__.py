"""``python -m bench.k8s``: the same GPU-shaped workload scheduled by kube-scheduler and by Berth on
a real kube-apiserver, one after the other, each on fresh state.

For each scheduler: a fresh etcd + kube-apiserver 1.34 (:class:`~berth_dev.devstack.kube.KubeControlPlane`),
``--nodes`` fake 8-GPU nodes (:mod:`berth_dev.devstack.fakenodes`), then the scheduler —

* kube-scheduler 1.34, stock default profile, its client limited by the configuration file's
  ``clientConnection.qps``/``burst``;
* Berth: a fresh Kafka broker and Postgres, the audit store migrated, the topics created, and every
  service as its own process (:mod:`berth_dev.supervisor`, the arguments of ``berth dev up
  --with-kubernetes``), the binder limited by ``--qps``/``--burst``;

— a warm-up (one pod per decision cell bound and deleted, through the whole path) and, for Berth,
a wait until its inventory and decision consumers have no lag (:mod:`bench.k8s.catchup`: its
equivalent of the informer cache sync kube-scheduler waits for before scheduling), then the
measured run: ``--pods`` pods (:mod:`bench.k8s.workload`) created as fast as 16 client threads
can, while a watch notes when each pod gets its node (or is marked unschedulable). The run ends
when every pod is bound, or when no pod was bound or marked for ``--settle`` seconds after the
last one was created (the rest do not fit). Figures: pods bound; pods per second = bound /
(last binding − first creation); create→bound latency p50/p99 per bound pod; GPU allocation =
GPUs of bound pods / all GPUs; pods left unbound that are marked unschedulable
(``PodScheduled=False``) and the time until every pod was bound or so marked ("settled"); and, as
checks, nodes whose pods ask for more GPUs than the node has (must be none).

Progress on stderr; a table, then as the LAST line one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.k8s.catchup import wait_caught_up
from bench.k8s.cpu import CpuSampler, ms_per_pod
from bench.k8s.workload import (
    DEFAULT_MIX,
    GpuPod,
    demand_ratio,
    gpu_allocation,
    gpu_pods,
    overcommitted_nodes,
    parse_mix,
    pod_manifest,
    stranded_gpus,
    throughput,
)
from bench.results import RECORD_HELP, emit

console = Console(stderr=True, width=120)
NAMESPACE = "bench"
GPUS_PER_NODE = 8
SCHEDULERS = ("kube-scheduler", "berth")
SCHEDULER_NAMES = {"kube-scheduler": "default-scheduler", "berth": "berth"}
CREATE_THREADS = 16
FIRST_BIND_S = 60.0
"""A run in which nothing was bound ends only this long after its start (plus --settle)."""
CELL_LABEL = "berth.io/cell"  # = berth.schemas.cells.CELL_LABEL: routes a warm-up pod to a cell


@dataclass(frozen=True)
class RunningScheduler:
    """What the measured run needs from a scheduler: a liveness check (raises if it died) and its
    client's API requests so far by HTTP method (from its ``rest_client_requests_total``)."""

    check_alive: Callable[[], None]
    metrics_text: Callable[[], str]
    kafka_bootstrap: str = ""
    """Berth's broker (empty for kube-scheduler)."""
    consumer_inputs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Consumer group → its input topics, that must have no lag before the measured run (Berth's
    cache sync, :mod:`bench.k8s.catchup`); empty for kube-scheduler, whose caches are synced before
    it binds its warm-up pod."""
    handed_over: Callable[[], int] = lambda: 0
    """Pods handed from one decision cell to another so far (Berth's ``berth_pods_handed_over_total``)."""

    def api_requests(self) -> dict[str, int]:
        return requests_by_method(self.metrics_text())


def counter_total(metrics_text: str, name: str) -> int:
    """The sum of counter ``name`` over its labels, from Prometheus text."""
    return sum(
        int(float(line.rpartition(" ")[2]))
        for line in metrics_text.splitlines()
        if line.startswith((f"{name}{{", f"{name} "))
    )


def requests_by_method(metrics_text: str) -> dict[str, int]:
    """Sum ``rest_client_requests_total`` over codes and hosts, by method, from Prometheus text."""
    totals: dict[str, int] = {}
    for line in metrics_text.splitlines():
        if line.startswith("rest_client_requests_total{"):
            labels, _, value = line.rpartition(" ")
            method = labels.split('method="', 1)[1].split('"', 1)[0] if 'method="' in labels else "?"
            totals[method] = totals.get(method, 0) + int(float(value))
    return dict(sorted(totals.items()))


@dataclass
class RunResult:
    """One scheduler's run."""

    scheduler: str
    pods: int
    bound: int = 0
    seconds: float = 0.0
    pods_per_s: float = 0.0
    gpu_allocation: float = 0.0
    allocated_gpus: int = 0
    stranded_gpus: int = 0
    creation_seconds: float = 0.0
    overcommitted_nodes: list[str] = field(default_factory=list)
    api_requests: dict[str, int] = field(default_factory=dict)
    timed_out: bool = False
    marked_unschedulable: int = 0
    """Pods left unbound that carry ``PodScheduled=False`` at the end (from the final list)."""
    settled_seconds: float = 0.0
    """Until the last pod was bound or first marked unschedulable, from the first creation: when
    every pod's fate was visible on the apiserver (of the pods marked by the run's end)."""
    handed_over: int = 0
    """Hand-overs between Berth's decision cells during the run (0 for kube-scheduler)."""
    bind_latency_p50_s: float | None = None
    bind_latency_p99_s: float | None = None
    """Create→bound per bound pod: from the apiserver's answer to the pod's creation to the watch
    seeing it with a node (None when no pod was bound)."""
    cpu_ms_per_pod: dict[str, float] = field(default_factory=dict)
    """CPU milliseconds per pod created, by process, from the first creation until every pod's fate
    was visible (``settled_seconds``, to within the 1 s sampling; :mod:`bench.k8s.cpu`): the
    scheduler's own processes, the control plane's and this bench's, which creates and watches the
    pods for either scheduler."""


# --- talking to the apiserver --------------------------------------------------------------------


def _create_namespace(api: Any, name: str) -> None:
    from kubernetes.client import CoreV1Api

    CoreV1Api(api).create_namespace({"metadata": {"name": name}})


def _create_pod(api: Any, body: dict[str, Any]) -> None:
    from kubernetes.client import CoreV1Api

    # Plain JSON in and out: the generated models cost more CPU than the request itself. The
    # answer is read whole before the connection goes back to the pool (else the next request on
    # it would read this answer's rest).
    response = CoreV1Api(api).create_namespaced_pod(NAMESPACE, body, _preload_content=False, _request_timeout=60)
    try:
        response.read()
    finally:
        response.release_conn()


def _list_pods(api: Any) -> tuple[list[dict[str, Any]], str]:
    """The namespace's pods (as JSON) and the list's resourceVersion."""
    from kubernetes.client import CoreV1Api

    response = CoreV1Api(api).list_namespaced_pod(NAMESPACE, _preload_content=False, _request_timeout=120)
    document = json.loads(response.data)
    return document["items"], document["metadata"]["resourceVersion"]


class BindWatch:
    """Notes the monotonic time at which each pod of the namespace is first seen with a node.

    A thread watches pods from a resourceVersion (re-watching from the last one seen whenever the
    server ends a watch) until :meth:`stop`.
    """

    def __init__(self, api: Any) -> None:
        self.api = api
        self.bound_at: dict[str, float] = {}
        self.marked_at: dict[str, float] = {}
        """When each pod was first seen with ``PodScheduled=False`` (marked unschedulable)."""
        self.error: BaseException | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bind-watch", daemon=True)
        self._version = ""

    def start(self) -> BindWatch:
        items, self._version = _list_pods(self.api)
        now = time.monotonic()
        for pod in items:
            if pod["spec"].get("nodeName"):
                self.bound_at.setdefault(pod["metadata"]["name"], now)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=40)

    def _run(self) -> None:
        from kubernetes.client import CoreV1Api

        core = CoreV1Api(self.api)
        try:
            while not self._stopping.is_set():
                response = core.list_namespaced_pod(
                    NAMESPACE,
                    watch=True,
                    resource_version=self._version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=20,
                    _preload_content=False,
                    _request_timeout=60,
                )
                try:
                    self._consume(response)
                finally:
                    response.release_conn()
        except BaseException as exc:
            self.error = exc

    def _consume(self, response: Any) -> None:
        pending = b""
        for chunk in response.stream(65536):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            now = time.monotonic()
            for line in lines:
                if not line.strip():
                    continue
                event = json.loads(line)
                pod = event["object"]
                if event["type"] == "ERROR":
                    raise RuntimeError(f"watch error: {pod}")  # 410 Gone cannot happen within a run
                self._version = pod["metadata"]["resourceVersion"]
                if event["type"] == "BOOKMARK":
                    continue
                if (pod.get("spec") or {}).get("nodeName"):
                    self.bound_at.setdefault(pod["metadata"]["name"], now)
                elif marked_unschedulable(pod):
                    self.marked_at.setdefault(pod["metadata"]["name"], now)
            if self._stopping.is_set():
                return


def marked_unschedulable(pod: dict[str, Any]) -> bool:
    """The pod carries ``PodScheduled=False`` (what both schedulers set on a pod that does not fit)."""
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


def _warm_up(api: Any, scheduler_name: str, cells: int, timeout: float = 180.0) -> None:
    """One small pod per decision cell, bound (through the whole path) and deleted again."""
    from kubernetes.client import CoreV1Api

    core = CoreV1Api(api)
    names = [f"warm-up-{cell}" for cell in range(cells)]
    for cell, name in enumerate(names):
        core.create_namespaced_pod(
            NAMESPACE,
            {
                "metadata": {"name": name, "labels": {CELL_LABEL: str(cell)}},
                "spec": {
                    "schedulerName": scheduler_name,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "100m"}},
                        }
                    ],
                },
            },
        )
    deadline = time.monotonic() + timeout
    while not all(core.read_namespaced_pod(name, NAMESPACE).spec.node_name for name in names):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the warm-up pods were not bound within {timeout:.0f} s")
        time.sleep(0.5)
    for name in names:
        core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
    while any(pod["metadata"]["name"] in names for pod in _list_pods(api)[0]):
        time.sleep(0.3)


def catch_up(running: RunningScheduler, scheduler: str, *, timeout: float) -> None:
    """Wait until the scheduler's consumers have read everything published so far (Berth's
    equivalent of kube-scheduler's cache sync, :mod:`bench.k8s.catchup`); nothing to wait for
    when it has none (kube-scheduler binds its warm-up pod only once its caches are synced)."""
    if running.consumer_inputs:
        wait_caught_up(
            running.kafka_bootstrap,
            running.consumer_inputs,
            timeout=timeout,
            progress=lambda line: console.print(f"  {scheduler}: catching up, {line}"),
        )


# --- the measured run ----------------------------------------------------------------------------


def measure(
    api: Any,
    pods: Sequence[GpuPod],
    scheduler: str,
    *,
    nodes: Sequence[str],
    settle: float,
    timeout: float,
    check_alive: Callable[[], None],
) -> RunResult:
    """Create ``pods`` for ``scheduler`` and follow them until all are bound or binding stops
    (``check_alive`` raises if the scheduler died: a dead scheduler is a failed run, not a slow one)."""
    result = RunResult(scheduler, len(pods))
    watch = BindWatch(api).start()
    bodies = [pod_manifest(pod, scheduler_name=SCHEDULER_NAMES[scheduler]) for pod in pods]
    created = 0
    created_lock = threading.Lock()

    created_at: dict[str, float] = {}

    def create(body: dict[str, Any]) -> None:
        nonlocal created
        _create_pod(api, body)
        with created_lock:
            created_at[body["metadata"]["name"]] = time.monotonic()
            created += 1

    started = time.monotonic()
    pool = ThreadPoolExecutor(CREATE_THREADS, thread_name_prefix="create")
    futures = [pool.submit(create, body) for body in bodies]
    creation_done: float | None = None
    last_report = 0.0
    try:
        while True:
            time.sleep(0.5)
            now = time.monotonic()
            check_alive()
            if watch.error is not None:
                raise RuntimeError(f"the pod watch failed: {watch.error}") from watch.error
            for future in [f for f in futures if f.done()]:
                future.result()  # a failed creation fails the run
            bound = len(watch.bound_at)
            if creation_done is None and created == len(bodies):
                creation_done = now
                result.creation_seconds = round(now - started, 2)
            if now - last_report >= 5:
                last_report = now
                console.print(
                    f"  {scheduler}: {now - started:6.1f} s  created {created:>6}/{len(bodies)}  "
                    f"bound {bound:>6}  ({throughput(bound, now - started):.0f} pods/s so far)"
                )
            if bound == len(bodies):
                break
            # A pod bound or marked unschedulable is news: the run goes on while either comes.
            last_news = max(
                max(watch.bound_at.values(), default=started), max(watch.marked_at.values(), default=started)
            )
            # Nothing bound at all yet: a pipeline may still be catching up (up to FIRST_BIND_S).
            quiet_since = max(last_news, creation_done or now) if bound else started + FIRST_BIND_S
            if creation_done is not None and now - quiet_since >= settle:
                break
            if now - started > timeout:
                result.timed_out = True
                console.print(f"[yellow]! {scheduler}: stopped after {timeout:.0f} s[/]")
                break
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        watch.stop()
    last_bind = max(watch.bound_at.values(), default=started)
    result.seconds = round(last_bind - started, 2)
    # The authoritative state: a final list, not the watch.
    items, _ = _list_pods(api)
    gpus = {pod.name: pod.gpus for pod in pods}
    placements = [
        (item["spec"]["nodeName"], gpus[item["metadata"]["name"]])
        for item in items
        if item["spec"].get("nodeName") and item["metadata"]["name"] in gpus
    ]
    result.bound = len(placements)
    result.allocated_gpus = sum(g for _, g in placements)
    result.pods_per_s = round(throughput(result.bound, result.seconds), 1)
    result.overcommitted_nodes = overcommitted_nodes(placements, GPUS_PER_NODE)
    bound_names = {item["metadata"]["name"] for item in items if item["spec"].get("nodeName")}
    marked = {
        item["metadata"]["name"]
        for item in items
        if item["metadata"]["name"] in gpus
        and item["metadata"]["name"] not in bound_names
        and marked_unschedulable(item)
    }
    result.marked_unschedulable = len(marked)
    fates = [*watch.bound_at.values(), *(t for name, t in watch.marked_at.items() if name in marked)]
    result.settled_seconds = round(max(fates, default=started) - started, 2)
    smallest_pending = min((pod.gpus for pod in pods if pod.name not in bound_names), default=None)
    result.stranded_gpus = stranded_gpus(placements, nodes, GPUS_PER_NODE, smallest_pending)
    result.bind_latency_p50_s, result.bind_latency_p99_s = bind_latencies(created_at, watch.bound_at)
    return result


def bind_latencies(created_at: dict[str, float], bound_at: dict[str, float]) -> tuple[float | None, float | None]:
    """p50 and p99 of create→bound over the pods with both times, in seconds (nearest rank). A
    watch event can beat the creating thread's clock read by a hair: such a pod counts as 0."""
    delays = sorted(max(0.0, bound_at[name] - created_at[name]) for name in bound_at if name in created_at)
    if not delays:
        return None, None

    def rank(q: float) -> float:
        return round(delays[min(len(delays) - 1, max(0, math.ceil(q * len(delays)) - 1))], 3)

    return rank(0.50), rank(0.99)


# --- the two schedulers --------------------------------------------------------------------------


@contextmanager
def kube_scheduler(plane: Any, work: Path, *, qps: float, burst: int) -> Iterator[RunningScheduler]:
    """The stock kube-scheduler with its client limited to ``qps``/``burst`` by its configuration
    file (with --config, its --kubeconfig/--kube-api-qps flags are ignored, so all goes there)."""
    import yaml
    from berth_dev.devstack.kube import SCHEDULER_USER, KubeSchedulerProcess

    kubeconfig = plane.kubeconfig_for(SCHEDULER_USER, work / "kube-scheduler.kubeconfig")
    config = work / "kube-scheduler.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "clientConnection": {"kubeconfig": str(kubeconfig), "qps": qps, "burst": burst},
                "leaderElection": {"leaderElect": False},
                "profiles": [{"schedulerName": "default-scheduler"}],
            }
        )
    )
    with KubeSchedulerProcess(plane, extra_args=[f"--config={config}"]) as process:

        def check_alive() -> None:
            if not process.is_alive():
                raise RuntimeError(f"kube-scheduler exited; its log: {process.log_path}")

        yield RunningScheduler(check_alive, process.metrics)


@contextmanager
def berth_pipeline(plane: Any, work: Path, *, qps: float, burst: int) -> Iterator[RunningScheduler]:
    """Berth as ``berth dev up --with-kubernetes`` runs it, on a fresh Kafka and Postgres; the
    binder limited to ``qps``/``burst``."""
    import urllib.request

    from berth.services.audit import db
    from berth_dev.devstack.stack import SERVICE_ORDER, DevStack, service_args
    from berth_dev.supervisor import Supervisor, create_pipeline_topics

    from berth.settings import DatabaseSettings, load_settings

    with DevStack() as stack:
        env = stack.env()
        db.upgrade(DatabaseSettings(url=env["BERTH_DATABASE_URL"]))
        asyncio.run(create_pipeline_topics(load_settings(kafka=env["BERTH_KAFKA_BOOTSTRAP"]).kafka))
        args = service_args(plane.kubeconfig_path, work)
        args["binder"] += ["--qps", str(qps), "--burst", str(burst)]
        with Supervisor(work / "logs", {**env, "BERTH_LOG_LEVEL": "warning"}) as services:
            for name in SERVICE_ORDER:
                services.start(name, args[name], wait=False)
            for service in services.services.values():
                service.wait_ready(timeout=180)

            def metrics_of(service: str) -> str:
                port = services.services[service].metrics_port
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
                    return answer.read().decode()

            yield RunningScheduler(
                services.check_alive,
                lambda: metrics_of("binder"),
                env["BERTH_KAFKA_BOOTSTRAP"],
                berth_consumer_inputs(),
                handed_over=lambda: counter_total(metrics_of("decision"), "berth_pods_handed_over_total"),
            )


def berth_consumer_inputs() -> dict[str, tuple[str, ...]]:
    """The consumer groups that fold cluster facts into the cells, and their input topics: the
    inventory (its source topics and its by-pod and by-node topics) and the decision service (the cells' inputs),
    named as the installation the environment describes (``BERTH_KAFKA__TOPIC_PREFIX``, ``..._GROUP_PREFIX``)."""
    from berth.schemas.topics import DECISION_INPUTS
    from berth.services.decision.service import GROUP as DECISION_GROUP
    from berth.services.inventory.app import APP_ID as INVENTORY_GROUP
    from berth.services.inventory.app import INPUT_TOPICS

    from berth.settings import load_settings

    names = load_settings().kafka.names
    return {
        names.group(INVENTORY_GROUP): tuple(names.topic(name) for name in INPUT_TOPICS),
        names.group(DECISION_GROUP): (names.topic(DECISION_INPUTS),),
    }


def run_one(scheduler: str, pods: Sequence[GpuPod], args: argparse.Namespace, work: Path) -> RunResult:
    """A fresh control plane and nodes, ``scheduler`` on them, the warm-up, the measured run."""
    from berth.schemas.topics import DECISION_INPUTS
    from berth_dev.devstack.fakenodes import create_fake_nodes
    from berth_dev.devstack.kube import KubeControlPlane

    work.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        step = time.monotonic()
        plane = stack.enter_context(KubeControlPlane())
        api = stack.enter_context(plane.connection().api_client(pool_size=CREATE_THREADS + 4))
        nodes = create_fake_nodes(api, args.nodes, gpus=GPUS_PER_NODE, prefix="gpu-")
        _create_namespace(api, NAMESPACE)
        console.print(
            f"[green]✓[/] {scheduler}: control plane and {args.nodes} nodes in {time.monotonic() - step:.0f} s"
        )
        step = time.monotonic()
        start: Callable[..., Any] = kube_scheduler if scheduler == "kube-scheduler" else berth_pipeline
        running: RunningScheduler = stack.enter_context(start(plane, work, qps=args.qps, burst=args.burst))
        _warm_up(api, SCHEDULER_NAMES[scheduler], DECISION_INPUTS.partitions if scheduler == "berth" else 1)
        warmed = time.monotonic()
        console.print(f"[green]✓[/] {scheduler}: running and warmed up in {warmed - step:.0f} s")
        if running.consumer_inputs:
            catch_up(running, scheduler, timeout=args.catch_up_timeout)
            console.print(f"[green]✓[/] {scheduler}: its consumers caught up {time.monotonic() - warmed:.1f} s later")
        before, handed_before = running.api_requests(), running.handed_over()
        with CpuSampler(os.getpid()) as cpu:
            started_at = time.monotonic()
            result = measure(
                api,
                pods,
                scheduler,
                nodes=nodes,
                settle=args.settle,
                timeout=args.timeout,
                check_alive=running.check_alive,
            )
        result.cpu_ms_per_pod = ms_per_pod(*cpu.used_until(started_at + result.settled_seconds), result.pods)
        after = running.api_requests()
        result.api_requests = {method: after[method] - before.get(method, 0) for method in after}
        result.handed_over = running.handed_over() - handed_before
    result.gpu_allocation = round(gpu_allocation([result.allocated_gpus], args.nodes, GPUS_PER_NODE), 4)
    console.print(
        f"[green]✓[/] {scheduler}: {result.bound}/{result.pods} bound in {result.seconds:.1f} s "
        f"({result.pods_per_s:.1f} pods/s), GPU allocation {result.gpu_allocation:.2%}; its API "
        f"requests during the run, by method: {result.api_requests}"
        + (f"; {result.handed_over} pods handed over between cells" if scheduler == "berth" else "")
    )
    console.print(
        f"  CPU ms per pod during the run ({sum(result.cpu_ms_per_pod.values()):.2f} in all): "
        + ", ".join(f"{name} {ms}" for name, ms in result.cpu_ms_per_pod.items())
    )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.k8s", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--nodes",
        type=int,
        default=1250,
        help="fake 8-GPU nodes (default %(default)s: the default 5,000 pods then ask for 96 %% of "
        "the GPUs, so every pod could be bound; --nodes 1000 asks for 120 %%)",
    )
    parser.add_argument("--pods", type=int, default=5000, help="pods to schedule (default %(default)s)")
    parser.add_argument(
        "--mix",
        type=parse_mix,
        default=dict(DEFAULT_MIX),
        help="GPUS:WEIGHT,... share of pods per GPU count (default 1:0.6,2:0.25,4:0.1,8:0.05)",
    )
    parser.add_argument("--seed", type=int, default=1, help="workload seed (default %(default)s)")
    parser.add_argument(
        "--qps",
        type=float,
        default=50.0,
        help="API requests per second for both schedulers' clients (default %(default)s, kube-scheduler's own default)",
    )
    parser.add_argument("--burst", type=int, default=100, help="API burst for both (default %(default)s)")
    parser.add_argument(
        "--settle",
        type=float,
        default=20.0,
        help="seconds without a new binding or unschedulable mark after the last creation that end a run "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--timeout", type=float, default=420.0, help="seconds a measured run may take (default %(default)s)"
    )
    parser.add_argument(
        "--catch-up-timeout",
        type=float,
        default=300.0,
        help="seconds Berth's inventory and decision consumers may take, after the warm-up, to "
        "read everything published so far (its cache sync) before the run (default %(default)s)",
    )
    parser.add_argument(
        "--schedulers", default=",".join(SCHEDULERS), help="which to run, in order (default %(default)s)"
    )
    parser.add_argument("--keep-logs", type=Path, help="keep the schedulers' configuration and Berth's logs here")
    parser.add_argument("--record", action="store_true", help=RECORD_HELP)
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.schedulers.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(SCHEDULERS))
    if unknown or not chosen:
        parser.error(f"--schedulers: choose from {', '.join(SCHEDULERS)} (got {args.schedulers!r})")

    from berth_dev.devstack.gobuild import ensure_kubernetes_binaries

    ensure_kubernetes_binaries()
    pods = gpu_pods(args.pods, seed=args.seed, mix=args.mix)
    demand = demand_ratio(pods, args.nodes, GPUS_PER_NODE)
    console.print(
        f"{args.pods} pods asking for {sum(p.gpus for p in pods)} GPUs ({demand:.0%} of "
        f"{args.nodes * GPUS_PER_NODE}); client QPS {args.qps:g}, burst {args.burst}"
    )
    started = time.monotonic()
    results: dict[str, RunResult] = {}
    with TemporaryDirectory(prefix="berth-bench-k8s-") as scratch:
        root = args.keep_logs or Path(scratch)
        for scheduler in chosen:
            results[scheduler] = run_one(scheduler, pods, args, root / scheduler)
    _print_table(results)
    summary = per_scheduler_figures(args.pods, results)
    summary.update(
        {
            "nodes": args.nodes,
            "gpus": args.nodes * GPUS_PER_NODE,
            "gpu_demand": round(demand, 3),
            "qps": args.qps,
            "burst": args.burst,
            "overcommitted_nodes": sum(len(r.overcommitted_nodes) for r in results.values()),
            "berth_handed_over": results["berth"].handed_over if "berth" in results else None,
            "elapsed_s": round(time.monotonic() - started, 1),
        }
    )
    headline = {"qps": args.qps, **{key: summary[key] for key in HEADLINE if summary.get(key) is not None}}
    emit("bench.k8s", summary, headline=headline, argv=argv, record=args.record)
    return 1 if summary["overcommitted_nodes"] else 0


SUMMARY_FIGURES: tuple[tuple[str, str], ...] = (
    ("bound", "bound"),
    ("pods_per_s", "pods_per_s"),
    ("gpu_allocation", "gpu_allocation"),
    ("stranded_gpus", "stranded_gpus"),
    ("marked_unschedulable", "marked_unschedulable"),
    ("settled_s", "settled_seconds"),
    ("bind_latency_p50_s", "bind_latency_p50_s"),
    ("bind_latency_p99_s", "bind_latency_p99_s"),
    ("cpu_ms_per_pod", "cpu_ms_per_pod"),
)
"""(key suffix in the JSON line, :class:`RunResult` field), in the order the line gives them."""


HEADLINE = (
    "berth_bound",
    "kube_scheduler_bound",
    "berth_pods_per_s",
    "kube_scheduler_pods_per_s",
    "berth_gpu_allocation",
    "kube_scheduler_gpu_allocation",
    "berth_bind_latency_p99_s",
    "kube_scheduler_bind_latency_p99_s",
)
"""The figures of the JSON line worth a row in the results log."""


def per_scheduler_figures(pods: int, results: dict[str, RunResult]) -> dict[str, Any]:
    """The JSON line's per-scheduler part: ``{"pods", "berth_<figure>", "kube_scheduler_<figure>", ...}``,
    figure by figure, both schedulers side by side; None for a scheduler that was not run."""
    summary: dict[str, Any] = {"pods": pods}
    for suffix, field_name in SUMMARY_FIGURES:
        for scheduler in ("berth", "kube-scheduler"):
            result = results.get(scheduler)
            summary[f"{scheduler.replace('-', '_')}_{suffix}"] = getattr(result, field_name) if result else None
    return summary


def _print_table(results: dict[str, RunResult]) -> None:
    table = Table(title="GPU-shaped pods on a real kube-apiserver")
    for column in (
        "scheduler",
        "bound",
        "seconds",
        "pods/s",
        "GPU allocation",
        "stranded GPUs",
        "creation s",
        "marked unschedulable",
        "settled s",
        "create→bound p50 / p99 s",
        "overcommitted",
    ):
        table.add_column(column, justify="right" if column != "scheduler" else "left")
    for result in results.values():
        table.add_row(
            result.scheduler,
            f"{result.bound}/{result.pods}",
            f"{result.seconds:.1f}",
            f"{result.pods_per_s:.1f}",
            f"{result.gpu_allocation:.2%}",
            str(result.stranded_gpus),
            f"{result.creation_seconds:.1f}",
            str(result.marked_unschedulable),
            f"{result.settled_seconds:.1f}",
            _latency_cell(result),
            str(len(result.overcommitted_nodes)) + (" (timed out)" if result.timed_out else ""),
        )
    console.print(table)


def _latency_cell(result: RunResult) -> str:
    if result.bind_latency_p50_s is None or result.bind_latency_p99_s is None:
        return "-"
    return f"{result.bind_latency_p50_s:.2f} / {result.bind_latency_p99_s:.2f}"


if __name__ == "__main__":
    sys.exit(main())
