"""``berth deschedule --policy POLICY [FILE ...] [-f PATH ...] [-R] [--config FILE]``: the evictions a
DeschedulerPolicy would make on the cluster of manifest files, offline.

Inputs are read as ``berth simulate`` reads them (files, directories, ``-``; all together one
cluster). Pods with ``spec.nodeName`` run there; the other pods are first given to the
scheduler (the same engine, queue order, no preemption: a descheduler evicts, the scheduler
does not here), and those that stay pending are what GPU defragmentation makes room for. Then
the policy's strategies run (:mod:`berth.core.descheduling`).

The policy is a ``DeschedulerPolicy`` (``descheduler/v1alpha1`` or ``descheduler/v1alpha2``, see
:mod:`berth.schemas.descheduler`). ``--history`` names a JSON-lines file of earlier evictions,
``{"workload": "NAMESPACE/KIND/NAME" | "pod": "NAMESPACE/NAME", "evicted_at": TIME}`` per line:
a workload evicted less than ``--cooldown`` seconds before ``--now`` is not evicted again.

Output, one JSON object per line: per eviction ``{"pod", "node", "strategy", "reason",
"target_node"}``, in the order they are planned, then ``{"summary": ...}``. Exit status 0; 2 for
a policy or input Berth cannot accept (the message names the file and field); 3 when there is
nothing to read.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer

from berth.core.admission import QuotaLedger
from berth.core.descheduling import (
    DEFAULT_COOLDOWN,
    Eviction,
    Plan,
    PodFacts,
    gpu_fragments,
    plan_evictions,
    selects_node,
    workload_of,
)
from berth.core.engine import Engine
from berth.kube.manifests import ManifestError, PodManifest, load_documents
from berth.metrics import DESCHEDULER_EVICTIONS, DESCHEDULER_LOOPS_PREVENTED
from berth.schemas.cluster import PodInfo
from berth.schemas.descheduler import DeschedulingPolicy, PolicyError, parse_policy
from berth.simulate import (
    EXIT_INVALID,
    EXIT_NO_INPUT,
    InputError,
    NoInputError,
    Session,
    _documents_of,
    _policy_events,
    load_file,
    load_scheduler_config,
    load_sources,
    locate_error,
    without_scheduler_configs,
)

__all__ = ["DeschedulingRun", "count", "deschedule", "load_history", "load_policy", "pod_facts", "run_deschedule"]


@dataclass
class DeschedulingRun:
    """What one run found: the plan, the cluster before and after it, and the engine holding the
    planned state (each evicted pod on its target)."""

    plan: Plan
    running: int
    pending: int
    gpus_before: tuple[int, int]
    gpus_after: tuple[int, int]
    engine: Engine

    def summary(self) -> dict[str, Any]:
        plan = self.plan
        return {
            "evictions": len(plan.evictions),
            "by_strategy": plan.evictions_by_strategy(),
            "loops_prevented": plan.loops_prevented(),
            "refused": {name: dict(sorted(counts.items())) for name, counts in sorted(plan.refused.items())},
            "running": self.running,
            "pending": self.pending,
            "pending_given_room": [f"{pod} -> {node}" for pod, node in plan.pending_placed],
            "nodes_freed": list(plan.nodes_freed),
            "whole_free_gpus": {"before": self.gpus_before[0], "after": self.gpus_after[0]},
            "stranded_gpu_milli": {"before": self.gpus_before[1], "after": self.gpus_after[1]},
        }


def load_policy(path: Path) -> DeschedulingPolicy:
    """The DeschedulerPolicy at ``path`` (YAML or JSON, one document)."""
    documents = [d for d in load_file(path) if d is not None]
    if len(documents) != 1:
        raise InputError(f"{path}: expected one DeschedulerPolicy document, found {len(documents)}")
    try:
        return parse_policy(documents[0])
    except PolicyError as exc:
        raise InputError(f"{path}: {exc}") from None


def pod_facts(documents: Sequence[Any], pods: Sequence[PodManifest]) -> dict[str, PodFacts]:
    """Per pod UID: whether its manifest mounts local storage (``emptyDir``, ``hostPath``: the
    DefaultEvictor's rule) or a PersistentVolumeClaim."""
    uid = {(m.pod.namespace, m.pod.name): m.pod.uid for m in pods}
    out: dict[str, PodFacts] = {}
    for document in documents:
        items = document.get("items") if isinstance(document, dict) and "items" in document else [document]
        for item in items if isinstance(items, list) else ():
            if not isinstance(item, dict) or item.get("kind") != "Pod":
                continue
            meta = item.get("metadata") or {}
            key = (meta.get("namespace") or "default", meta.get("name"))
            volumes = [v for v in (item.get("spec") or {}).get("volumes") or () if isinstance(v, dict)]
            local = any("emptyDir" in v or "hostPath" in v for v in volumes)
            pvc = any("persistentVolumeClaim" in v for v in volumes)
            if key in uid and (local or pvc):
                out[uid[key]] = PodFacts(local_storage=local, pvc=pvc)
    return out


def _parse_time(text: str, where: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"{where}: {text!r} is not an ISO 8601 time (e.g. 2026-01-01T12:00:00Z)") from None
    if value.tzinfo is None:
        raise InputError(f"{where}: {text!r} has no time zone (end it with Z for UTC)")
    return value.astimezone(UTC)


def load_history(path: Path, pods: Sequence[PodInfo]) -> dict[str, datetime]:
    """Per workload key, the last eviction the history file records."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise NoInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    by_pod = {pod.key: workload_of(pod) for pod in pods}
    out: dict[str, datetime] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}: line {number}"
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: invalid JSON: {exc.msg}") from None
        if not isinstance(entry, dict) or "evicted_at" not in entry or not ("workload" in entry or "pod" in entry):
            raise InputError(f'{where}: expected {{"workload" or "pod", "evicted_at"}}')
        workload = entry.get("workload") or by_pod.get(str(entry["pod"]), f"{entry['pod']}".replace("/", "/Pod/", 1))
        when = _parse_time(str(entry["evicted_at"]), where)
        out[workload] = max(when, out.get(workload, when))
    return out


def run_deschedule(
    documents: Sequence[Any],
    policy: DeschedulingPolicy,
    *,
    config: Path | None = None,
    history: Path | None = None,
    now: datetime | None = None,
    cooldown: timedelta = DEFAULT_COOLDOWN,
) -> DeschedulingRun:
    """Plan the evictions of ``policy`` on the cluster of ``documents``; raises ManifestError
    or InputError for input Berth cannot accept."""
    bundle = load_documents(documents)
    nodes = {node.name for node in bundle.nodes}
    # The policy's nodeSelector is the set of nodes descheduling works on, as sources and targets.
    selected = [node for node in bundle.nodes if selects_node(policy.node_selector, node.labels)]
    bound: list[PodManifest] = []
    pending: list[PodManifest] = []
    for item in bundle.pods:
        if item.pod.phase in ("Succeeded", "Failed"):
            continue
        if item.pod.node_name:
            if item.pod.node_name not in nodes:
                raise ManifestError(
                    f"Pod {item.pod.key}", "spec.nodeName", f"node {item.pod.node_name!r} is not defined in the input"
                )
            if any(node.name == item.pod.node_name for node in selected):
                bound.append(item)
        else:
            pending.append(item)
    ledger = QuotaLedger.of(bundle.resource_quotas)
    for item in bound:
        ledger = ledger.charge(item.pod.namespace, item.pod.priority_class_name, item.resources)
    admitted: list[PodInfo] = []
    for item in pending:
        if item.rejection or item.scheduling_gates:
            continue
        decision = ledger.admit(item.pod.name, item.pod.namespace, item.pod.priority_class_name, item.resources)
        if decision.admitted:
            ledger = decision.ledger
            admitted.append(item.pod)
    session = Session.of(
        selected,
        [b.pod for b in bound],
        config=load_scheduler_config(config),
        policies=_policy_events(bundle),
        namespaces=bundle.namespaces,
    )
    engine = session.engine
    waiting: list[PodInfo] = []
    for index in sorted(range(len(admitted)), key=lambda i: (-admitted[i].priority, i)):
        pod = admitted[index]
        if pod.pod_group or not engine.schedule(pod, preempt=False, profile=session._profile(pod)).placed:
            waiting.append(pod)
    recent = load_history(history, [b.pod for b in bound]) if history is not None else {}
    before = gpu_fragments(engine)
    plan = plan_evictions(
        engine,
        policy,
        pending=waiting,
        facts=pod_facts(documents, bundle.pods),
        recent_evictions=recent,
        now=now,
        cooldown=cooldown,
    )
    return DeschedulingRun(plan, len(bound), len(waiting), before, gpu_fragments(engine), engine)


# --- live state ----------------------------------------------------------------------------------

LIVE_KINDS = (
    ("Namespace", "v1"),
    ("PriorityClass", "scheduling.k8s.io/v1"),
    ("Node", "v1"),
    ("Pod", "v1"),
    ("PodDisruptionBudget", "policy/v1"),
)


def live_documents(api_client: Any) -> list[dict[str, Any]]:
    """The cluster's Namespaces, PriorityClasses, Nodes, Pods (not being deleted) and
    PodDisruptionBudgets as manifests, for :func:`run_deschedule`."""
    from kubernetes.client import CoreV1Api, PolicyV1Api, SchedulingV1Api

    core = CoreV1Api(api_client)
    lists: dict[str, list[Any]] = {
        "Namespace": core.list_namespace().items,
        "PriorityClass": SchedulingV1Api(api_client).list_priority_class().items,
        "Node": core.list_node().items,
        "Pod": [p for p in core.list_pod_for_all_namespaces().items if not _being_deleted(p)],
        "PodDisruptionBudget": PolicyV1Api(api_client).list_pod_disruption_budget_for_all_namespaces().items,
    }
    documents: list[dict[str, Any]] = []
    for kind, api_version in LIVE_KINDS:
        for item in lists[kind]:
            document = api_client.sanitize_for_serialization(item)
            document["apiVersion"], document["kind"] = api_version, kind
            document.get("metadata", {}).pop("managedFields", None)
            documents.append(document)
    return documents


def _being_deleted(pod: Any) -> bool:
    metadata = pod.metadata
    return metadata is not None and metadata.deletion_timestamp is not None


def evict(api_client: Any, eviction: Eviction, grace_period_seconds: int | None) -> str:
    """POST the pod's ``eviction`` (policy/v1, the pod's UID as precondition, so a newer pod of
    the same name is never evicted); the result as printed: ``evicted``, or why not (the
    apiserver's own PodDisruptionBudget check answers 429)."""
    from kubernetes.client import CoreV1Api, V1DeleteOptions, V1Eviction, V1ObjectMeta, V1Preconditions
    from kubernetes.client.exceptions import ApiException

    pod = eviction.pod
    body = V1Eviction(
        metadata=V1ObjectMeta(name=pod.name, namespace=pod.namespace),
        delete_options=V1DeleteOptions(
            preconditions=V1Preconditions(uid=pod.uid), grace_period_seconds=grace_period_seconds
        ),
    )
    try:
        CoreV1Api(api_client).create_namespaced_pod_eviction(pod.name, pod.namespace, body)
    except ApiException as exc:
        if exc.status == 429:
            return "refused: a disruption budget forbids it now (the apiserver's check)"
        if exc.status == 404:
            return "refused: the pod is gone"
        if exc.status == 409:
            return "refused: another pod has that name now"
        raise
    return "evicted"


def append_history(path: Path, evictions: Sequence[Eviction], at: datetime) -> None:
    """Record evictions made at ``at`` in the ``--history`` file, so that the next run's cooldown sees them."""
    stamp = at.astimezone(UTC).isoformat().replace("+00:00", "Z")
    with path.open("a", encoding="utf-8") as out:
        for eviction in evictions:
            out.write(json.dumps({"workload": workload_of(eviction.pod), "evicted_at": stamp}) + "\n")


def count(plan: Plan) -> None:
    """Add ``plan`` to the descheduler's counters (evictions and loops prevented, per strategy)."""
    for strategy, evictions in plan.evictions_by_strategy().items():
        DESCHEDULER_EVICTIONS.labels(strategy=strategy).inc(evictions)
    for strategy, prevented in plan.loops_prevented().items():
        DESCHEDULER_LOOPS_PREVENTED.labels(strategy=strategy).inc(prevented)


def _fail(code: int, message: str) -> typer.Exit:
    print(f"error: {message}", file=sys.stderr)
    return typer.Exit(code)


def deschedule(
    files: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Manifests: files (multi-document YAML, or JSON), directories or - for standard input.",
            show_default=False,
        ),
    ] = None,
    policy: Annotated[
        Path | None,
        typer.Option(
            "--policy",
            help="DeschedulerPolicy file (descheduler/v1alpha1 strategies or descheduler/v1alpha2 profiles).",
            show_default=False,
        ),
    ] = None,
    filename: Annotated[
        list[Path] | None,
        typer.Option("--filename", "-f", help="More manifests, read after FILES; repeatable.", show_default=False),
    ] = None,
    recursive: Annotated[
        bool, typer.Option("--recursive", "-R", help="Read the directories' subdirectories too.")
    ] = False,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="Scheduler configuration the engine places pods with; default: Berth's profile."),
    ] = None,
    history: Annotated[
        Path | None,
        typer.Option(
            "--history",
            help='Earlier evictions, JSON lines {"workload": NS/KIND/NAME or "pod": NS/NAME, "evicted_at": TIME}.',
            show_default=False,
        ),
    ] = None,
    now: Annotated[
        str | None,
        typer.Option(
            "--now", help="The time the cooldown is measured at (ISO 8601); default: the clock.", show_default=False
        ),
    ] = None,
    cooldown: Annotated[
        float,
        typer.Option("--cooldown", min=0, help="Seconds a workload evicted once is left alone."),
    ] = DEFAULT_COOLDOWN.total_seconds(),
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            "--kubeconfig",
            help="Plan on a live cluster's state (nodes, pods, PDBs, priority classes) instead of files.",
            show_default=False,
        ),
    ] = None,
    context: Annotated[
        str | None, typer.Option("--context", help="The kubeconfig context to use.", show_default=False)
    ] = None,
    do_evict: Annotated[
        bool,
        typer.Option(
            "--evict",
            help='With --kubeconfig: evict through the Eviction API (policy/v1); each line then has "result". '
            "Without it nothing is changed.",
        ),
    ] = False,
) -> None:
    """Print the evictions a DeschedulerPolicy would make on manifest files, offline: one JSON line each.

    An eviction is planned only when Berth's engine places the pod on another node that passes
    every filter (and, for LowNodeUtilization, stays below targetThresholds), displacing nothing;
    PodDisruptionBudgets, priorities, the evictor rules and the eviction limits are respected.
    With --kubeconfig the cluster is the live one, and --evict makes the evictions (appended to
    --history when given, so that the next run's cooldown sees them).
    Exit status: 0; 2 for a policy or manifests Berth cannot accept; 3 when there is nothing to read;
    69 when the apiserver cannot be reached.
    """
    if policy is None:
        raise _fail(EXIT_INVALID, "no policy: give --policy FILE (a DeschedulerPolicy)")
    if kubeconfig is not None and (files or filename):
        raise _fail(EXIT_INVALID, "give manifest files or --kubeconfig, not both")
    if do_evict and kubeconfig is None:
        raise _fail(EXIT_INVALID, "--evict needs --kubeconfig: files describe a cluster, they cannot be evicted from")
    if kubeconfig is not None:
        _deschedule_live(policy, kubeconfig, context, do_evict, config, history, now, cooldown)
        return
    try:
        sources = load_sources([*(files or ()), *(filename or ())], recursive=recursive)
        chosen = load_policy(policy)
        load_scheduler_config(config)
        moment = _parse_time(now, "--now") if now is not None else datetime.now(UTC)
    except NoInputError as exc:
        raise _fail(EXIT_NO_INPUT, str(exc)) from None
    except InputError as exc:
        raise _fail(EXIT_INVALID, str(exc)) from None
    documents, origins = _documents_of(sources)
    warnings: list[str] = []
    documents, origins = without_scheduler_configs(documents, origins, warnings)
    # A directory may hold the policy beside the manifests: it is not a cluster object.
    kept = [i for i, d in enumerate(documents) if not (isinstance(d, dict) and d.get("kind") == "DeschedulerPolicy")]
    documents, origins = [documents[i] for i in kept], [origins[i] for i in kept]
    try:
        result = run_deschedule(
            documents, chosen, config=config, history=history, now=moment, cooldown=timedelta(seconds=cooldown)
        )
    except NoInputError as exc:
        raise _fail(EXIT_NO_INPUT, str(exc)) from None
    except InputError as exc:
        raise _fail(EXIT_INVALID, str(exc)) from None
    except ManifestError as exc:
        raise _fail(EXIT_INVALID, locate_error(exc, documents, origins)) from None
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    count(result.plan)
    out = sys.stdout
    for eviction in result.plan.evictions:
        out.write(json.dumps(eviction.to_json()) + "\n")
    out.write(json.dumps({"summary": result.summary()}) + "\n")
    out.flush()


def _deschedule_live(
    policy: Path,
    kubeconfig: Path,
    context: str | None,
    do_evict: bool,
    config: Path | None,
    history: Path | None,
    now: str | None,
    cooldown: float,
) -> None:
    try:
        chosen = load_policy(policy)
        load_scheduler_config(config)
        moment = _parse_time(now, "--now") if now is not None else datetime.now(UTC)
    except NoInputError as exc:
        raise _fail(EXIT_NO_INPUT, str(exc)) from None
    except InputError as exc:
        raise _fail(EXIT_INVALID, str(exc)) from None
    from kubernetes.client import ApiClient, Configuration
    from kubernetes.config import load_kube_config

    configuration = Configuration()
    load_kube_config(
        config_file=str(kubeconfig), context=context, client_configuration=configuration, persist_config=False
    )
    with ApiClient(configuration) as api_client:
        documents = live_documents(api_client)
        try:
            result = run_deschedule(
                documents,
                chosen,
                config=config,
                history=history if history is not None and history.exists() else None,
                now=moment,
                cooldown=timedelta(seconds=cooldown),
            )
        except (InputError, ManifestError) as exc:
            raise _fail(EXIT_INVALID, f"the live cluster: {exc}") from None
        count(result.plan)
        results = [
            evict(api_client, e, chosen.grace_period_seconds) if do_evict else None for e in result.plan.evictions
        ]
    made = [e for e, outcome in zip(result.plan.evictions, results, strict=True) if outcome == "evicted"]
    if history is not None and made:
        append_history(history, made, moment)
    out = sys.stdout
    for eviction, outcome in zip(result.plan.evictions, results, strict=True):
        line = eviction.to_json()
        if outcome is not None:
            line["result"] = outcome
        out.write(json.dumps(line) + "\n")
    summary = result.summary()
    if do_evict:
        summary["evicted"] = len(made)
    out.write(json.dumps({"summary": summary}) + "\n")
    out.flush()
