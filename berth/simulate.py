"""``berth simulate [FILE ...] [-f PATH ...] [-R] [--config FILE]``: schedule manifests' pending
pods, offline.

Inputs are read as ``kubectl apply -f`` reads them: files (whatever their names), directories
(their ``*.yaml``, ``*.yml`` and ``*.json`` files in name order; subdirectories too with ``-R``)
and ``-`` for standard input, positional ones first, then each ``-f`` in order. All of them
together are one cluster. Reads Namespaces, Nodes, Pods, PriorityClasses, PodGroups, ResourceQuotas, LimitRanges,
PodDisruptionBudgets, AgentPools and ToolBindings (multi-document YAML, or JSON: one object or a
``v1 List``), then does what the cluster and Berth would do:

1. admission, in input (creation) order: LimitRange defaults and bounds, ResourceQuota;
2. pods with ``spec.nodeName`` are running there and hold capacity (GPU devices from
   ``berth.io/gpu-devices`` or assigned deterministically, in input order);
3. every other pod is scheduled in queue order — higher priority first, then input order — by
   the same placement engine the decision service runs (configuration: ``--config``, a
   KubeSchedulerConfiguration-style document, or Berth's default profile). A pod of a PodGroup
   is decided together with the group's other pending members, all or nothing; a pod that fits
   nowhere may preempt lower-priority pods. An AgentPool's replicas are created as its
   controller would (:func:`pool_replicas`) and placed with its cache preferences and its
   ``fastScheduling.maxNodesToScore``; a ToolBinding's ``queueConfig`` joins the AgentPool it
   names (a file has no queue lag, so nothing is scaled).

Output, one JSON object per line: per decided pod ``{"pod", "node", "gpus", "message"}``, plus
``"victims"`` when it preempted and ``"group"`` for gang members; last a ``{"summary": ...}``.
Exit status 0 (whatever was placed); 2 for input Berth cannot accept, with a message on stderr
naming the file, the document and the field; 3 when there is nothing to read (a path that does not
exist, a directory without manifests, no input at all).

This module is the I/O shell around the pure core: it reads files and the clock (for the
``decisions_per_second`` figure only); the decisions themselves are deterministic.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import click
import typer
import yaml

from berth.cells.pool_placement import max_nodes_to_score, with_preferences
from berth.cells.pools import merge_cluster_spec
from berth.configfiles import load_config
from berth.core import messages
from berth.core.admission import QuotaLedger
from berth.core.config import KINDS as CONFIG_KINDS
from berth.core.config import ConfigError, default_document
from berth.core.engine import Engine
from berth.kube.manifests import EPOCH, ManifestBundle, ManifestError, PodManifest, load_documents
from berth.kube.replicas import LABEL_AGENT_POOL, AgentPool, ReplicaError, replica_admission
from berth.schemas.agentpool import AgentPoolSpec
from berth.schemas.cluster import NodeInfo, PodInfo
from berth.schemas.policy import PolicyObserved

__all__ = [
    "EXIT_INVALID",
    "EXIT_NO_INPUT",
    "Outcome",
    "Session",
    "Source",
    "load_file",
    "load_sources",
    "main",
    "pool_replicas",
    "run",
    "simulate",
]


class InputError(ValueError):
    """The file cannot be read as manifests; the message says where."""


@dataclass(frozen=True)
class Outcome:
    """One scheduling outcome, as printed."""

    pod: str
    node: str | None
    gpus: tuple[int, ...] = ()
    message: str = ""
    victims: tuple[str, ...] = ()
    group: str | None = None
    gpu_milli: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pod": self.pod, "node": self.node, "gpus": list(self.gpus), "message": self.message}
        if self.victims:
            out["victims"] = list(self.victims)
        if self.group:
            out["group"] = self.group
        return out


# --- reading -------------------------------------------------------------------------------------

STDIN = "-"
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
"""The files a directory contributes, as ``kubectl apply -f DIR`` reads them."""
EXIT_INVALID = 2
"""Input Berth cannot accept: unparsable YAML or JSON, an invalid object, a bad ``--config``."""
EXIT_NO_INPUT = 3
"""Nothing to read: a path that does not exist or cannot be read, a directory without manifests,
no file given, or stdin named twice."""


class NoInputError(InputError):
    """A path that cannot be read, or nothing to read at all (exit :data:`EXIT_NO_INPUT`)."""


@dataclass(frozen=True)
class Source:
    """The documents of one input (a file, or stdin as ``<stdin>``), in order."""

    name: str
    documents: tuple[Any, ...]


def parse_text(text: str, name: str, *, json_suffix: bool = False) -> list[Any]:
    """The documents of one input's text: JSON (one object, or a list of them) when the name ends
    in ``.json`` or the text starts with ``{``/``[``, else multi-document YAML. Errors name the
    input, the (1-based) document and the line."""
    if json_suffix or text.lstrip().startswith(("{", "[")):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{name}: line {exc.lineno} column {exc.colno}: invalid JSON: {exc.msg}") from None
        return list(data) if isinstance(data, list) else [data]
    documents: list[Any] = []
    try:
        for document in yaml.safe_load_all(text):
            documents.append(document)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError(f"{name}: document {len(documents) + 1}: {where}invalid YAML: {problem}") from None
    return documents


def load_file(path: Path) -> list[Any]:
    """The documents of a YAML (multi-document) or JSON file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise NoInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    return parse_text(text, str(path), json_suffix=path.suffix.lower() == ".json")


def _directory_files(directory: Path, recursive: bool) -> list[Path]:
    """A directory's manifest files (by suffix) in lexical order; with ``recursive``, those of its
    subdirectories too, each where its name sorts (the order of ``kubectl apply -f DIR -R``)."""
    try:
        entries = sorted(directory.iterdir(), key=lambda p: p.name)
    except OSError as exc:
        raise NoInputError(f"{directory}: cannot list: {exc.strerror or exc}") from None
    files: list[Path] = []
    for entry in entries:
        if entry.is_dir():
            if recursive:
                files += _directory_files(entry, recursive)
        elif entry.suffix.lower() in MANIFEST_SUFFIXES:
            files.append(entry)
    return files


def load_sources(paths: Sequence[Path | str], *, recursive: bool = False, stdin: Any = None) -> list[Source]:
    """Every input named on the command line, in order: a file (whatever its name), a directory
    (its ``*.yaml``, ``*.yml`` and ``*.json`` files, sorted; subdirectories with ``recursive``),
    or ``-`` for standard input (once)."""
    if not paths:
        raise NoInputError("no input: name a file, a directory or - (standard input), e.g. berth simulate -f examples/")
    sources: list[Source] = []
    read_stdin = False
    for raw in paths:
        if str(raw) == STDIN:
            if read_stdin:
                raise NoInputError("standard input (-) can be read only once")
            read_stdin = True
            stream = stdin if stdin is not None else sys.stdin
            sources.append(Source("<stdin>", tuple(parse_text(stream.read(), "<stdin>"))))
            continue
        path = Path(raw)
        if path.is_dir():
            files = _directory_files(path, recursive)
            if not files:
                hint = "" if recursive else " (subdirectories are read with -R)"
                raise NoInputError(f"{path}: no manifests in this directory: no *.yaml, *.yml or *.json file{hint}")
            sources += [Source(str(file), tuple(load_file(file))) for file in files]
        elif not path.exists():
            raise NoInputError(f"{path}: no such file or directory")
        else:
            sources.append(Source(str(path), tuple(load_file(path))))
    return sources


def _documents_of(sources: Sequence[Source]) -> tuple[list[Any], list[tuple[str, int]]]:
    """All documents in order, and where each came from (input name, 1-based document number)."""
    documents: list[Any] = []
    origins: list[tuple[str, int]] = []
    for source in sources:
        for number, document in enumerate(source.documents, start=1):
            documents.append(document)
            origins.append((source.name, number))
    return documents, origins


_DOCUMENT_NUMBER = re.compile(r"document (\d+)")


def locate_error(exc: ManifestError, documents: Sequence[Any], origins: Sequence[tuple[str, int]]) -> str:
    """``exc``'s message with the input it concerns: ``document N`` (numbered across all inputs)
    becomes ``FILE: document n``; an error naming an object gets the input defining it in front."""
    message = str(exc)
    if _DOCUMENT_NUMBER.search(message):

        def local(match: re.Match[str]) -> str:
            number = int(match.group(1))
            if not 1 <= number <= len(origins):
                return match.group(0)
            name, index = origins[number - 1]
            return f"{name}: document {index}"

        return _DOCUMENT_NUMBER.sub(local, message, count=1)
    kind, _, ref = exc.ref.partition(" ")
    namespace, _, name = ref.rpartition("/")
    for document, (source, index) in zip(documents, origins, strict=True):
        for item in _items(document):
            metadata = item.get("metadata") if isinstance(item.get("metadata"), dict) else {}
            if (
                item.get("kind") == kind
                and metadata.get("name") == name
                and (not namespace or (metadata.get("namespace") or "default") == namespace)
            ):
                return f"{source}: document {index}: {message}"
    return message


def _items(document: Any) -> list[dict[str, Any]]:
    if not isinstance(document, dict):
        return []
    items = document.get("items")
    if str(document.get("kind", "")).endswith("List") and isinstance(items, list):
        return [item for item in items if isinstance(item, dict)]
    return [document]


# --- the scheduling session ----------------------------------------------------------------------


def _policy_events(bundle: ManifestBundle) -> list[PolicyObserved]:
    events = []
    for kind, field_name, items in (
        ("PriorityClass", "priority_class", bundle.priority_classes),
        ("PodGroup", "pod_group", bundle.pod_groups),
        ("ResourceQuota", "resource_quota", bundle.resource_quotas),
        ("LimitRange", "limit_range", bundle.limit_ranges),
        ("PodDisruptionBudget", "pod_disruption_budget", bundle.pod_disruption_budgets),
    ):
        for item in items:
            events.append(PolicyObserved(kind=kind, observed_at=EPOCH, **{field_name: item}))
    return events


def load_scheduler_config(path: Path | None) -> dict[str, Any]:
    """The scheduler configuration document at ``path`` (YAML), validated, or the core's built-in
    profile (what the decision service runs without ``--config``)."""
    if path is None:
        return default_document()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise NoInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        load_config(text)
    except ConfigError as exc:
        raise InputError(f"{path}: {exc}") from None
    return yaml.safe_load(text)


class Session:
    """The engine driven the way a decision cell drives it: one pod (or one gang) at a time,
    placements assumed as they are decided."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.min_member: dict[tuple[str, str], int] = {}
        self.pool_limits: dict[tuple[str, str], int] = {}
        """(namespace, AgentPool) → its ``fastScheduling.maxNodesToScore``: the cap of its
        replicas' cycles (replicas by their ``berth.io/agent-pool`` label)."""

    @classmethod
    def of(
        cls,
        nodes: Iterable[NodeInfo],
        bound: Iterable[PodInfo],
        *,
        config: Any = None,
        policies: Iterable[PolicyObserved] = (),
        namespaces: Iterable[Any] = (),
    ) -> Session:
        """``config``: a configuration document, a Path to one, or None for the built-in profile."""
        if config is None or isinstance(config, Path):
            config = load_scheduler_config(config)
        session = cls(Engine(config))
        engine = session.engine
        for namespace in namespaces:
            engine.upsert_namespace(namespace.name, namespace.labels)
        for node in sorted(nodes, key=lambda n: n.name):
            engine.upsert_node(node)
        for event in policies:
            engine.upsert_policy(event)
            if event.kind == "PodGroup" and event.pod_group is not None:
                session.min_member[(event.pod_group.namespace, event.pod_group.name)] = event.pod_group.min_member
        for pod in bound:
            engine.upsert_bound_pod(pod)
        return session

    def _profile(self, pod: PodInfo) -> str:
        # Every pending pod of the file is Berth's to schedule: a pod naming another scheduler
        # (the default "default-scheduler") is scheduled by the first profile.
        profiles = self.engine.profiles
        return pod.scheduler_name if pod.scheduler_name in profiles else profiles[0]

    def place_one(self, pod: PodInfo) -> Outcome:
        """Decide one pod; preempt if the profile's PostFilter nominates a node."""
        limit = self.pool_limits.get((pod.namespace, pod.labels.get(LABEL_AGENT_POOL, "")))
        outcome = self.engine.schedule(pod, profile=self._profile(pod), max_nodes_to_score=limit)
        victims = tuple(sorted(victim.key for victim in outcome.victims))
        if outcome.placed:
            placed = outcome.placements[0]
            return Outcome(pod.key, placed.node, placed.gpu_devices, "", victims, gpu_milli=placed.gpu_milli)
        return Outcome(pod.key, None, (), outcome.message, victims)

    def place_gang(self, pods: Sequence[PodInfo], min_member: int) -> list[Outcome]:
        """Decide one gang atomically (see :mod:`berth.core.gangs`)."""
        group = f"{pods[0].namespace}/{pods[0].pod_group}"
        result = self.engine.schedule_gang(pods, min_member, profile=self._profile(pods[0]))
        placed = {placement.pod.uid: placement for placement in result.placements}
        outcomes = []
        for pod in pods:
            placement = placed.get(pod.uid)
            if placement is not None:
                outcomes.append(
                    Outcome(pod.key, placement.node, placement.gpu_devices, "", (), group, placement.gpu_milli)
                )
            else:
                outcomes.append(Outcome(pod.key, None, (), result.member_messages.get(pod.uid, ""), (), group))
        return outcomes

    def schedule_all(self, pods: Sequence[PodInfo]) -> list[Outcome]:
        """Schedule pending pods in queue order (priority, then the given order); a gang's
        pending members are decided together when its first member comes up."""
        order = sorted(range(len(pods)), key=lambda i: (-pods[i].priority, i))
        done: set[str] = set()
        outcomes: list[Outcome] = []
        for i in order:
            pod = pods[i]
            if pod.uid in done:
                continue
            if pod.pod_group:
                key = (pod.namespace, pod.pod_group)
                members = [
                    pods[j] for j in order if pods[j].pod_group == pod.pod_group and pods[j].namespace == pod.namespace
                ]
                done.update(m.uid for m in members)
                group = f"{key[0]}/{key[1]}"
                if key not in self.min_member:
                    message = messages.gang_not_found(group)
                    outcomes += [Outcome(m.key, None, (), message, (), group) for m in members]
                    continue
                outcomes += self.place_gang(members, self.min_member[key])
            else:
                done.add(pod.uid)
                outcomes.append(self.place_one(pod))
        return outcomes

    def gpu_milli_used(self) -> int:
        """GPU milli held across the cluster (whole devices and shares; MIG slices not counted)."""
        return self.engine.gpu_milli_used()


# --- the command ---------------------------------------------------------------------------------


@dataclass
class Report:
    outcomes: list[Outcome] = field(default_factory=list)
    running: int = 0
    rejected: int = 0
    gated: int = 0
    seconds: float = 0.0
    warnings: tuple[str, ...] = ()

    def summary(self) -> dict[str, Any]:
        decided = len(self.outcomes)
        placed = sum(1 for o in self.outcomes if o.node)
        victims = sum(len(o.victims) for o in self.outcomes)
        return {
            "pods": decided,
            "placed": placed,
            "unschedulable": decided - placed - self.gated,
            "rejected_by_admission": self.rejected,
            "scheduling_gated": self.gated,
            "running_before": self.running,
            "preemptions": sum(1 for o in self.outcomes if o.victims),
            "victims": victims,
            "gangs_placed": len({o.group for o in self.outcomes if o.group and o.node}),
            "decisions_per_second": round(decided / self.seconds, 1) if self.seconds > 0 else None,
        }


def bound_specs(bundle: ManifestBundle, warnings: list[str]) -> dict[tuple[str, str], dict[str, Any]]:
    """Each AgentPool's spec with the ``queueConfig`` of the ToolBinding that names it (its
    ``spec.agentPool``, same namespace). A binding naming no pool, or one not in the input, gets a
    warning; a pool given a ``queueConfig`` twice is an error."""
    specs = {(p.namespace, p.name): dict(p.spec) for p in bundle.agent_pools}
    bound_by: dict[tuple[str, str], str] = {}
    for binding in bundle.tool_bindings:
        ref = f"ToolBinding {binding.namespace}/{binding.name}"
        if binding.queue_config is None:
            continue
        key = (binding.namespace, binding.agent_pool or "")
        if binding.agent_pool is None or key not in specs:
            missing = (
                "names no AgentPool (spec.agentPool)"
                if binding.agent_pool is None
                else (f"names AgentPool {binding.namespace}/{binding.agent_pool}, which the input does not define")
            )
            warnings.append(f"{ref} {missing}: its queueConfig scales no pool")
            continue
        if "queueConfig" in specs[key] or key in bound_by:
            pool = f"AgentPool {key[0]}/{key[1]}"
            other = bound_by.get(key, pool)
            raise InputError(f"{ref}: spec.queueConfig: {other} gives {pool} one already; give one")
        specs[key]["queueConfig"] = dict(binding.queue_config)
        bound_by[key] = ref
    return specs


def pool_replicas(bundle: ManifestBundle, warnings: list[str] | None = None) -> list[PodManifest]:
    """The replica pods the AgentPools' controller would create now, in pool order: for each
    pool, ``spec.replicas`` (else ``minReplicas``, else 1) less its pods already in the file (label
    ``berth.io/agent-pool``, same namespace, not finished), named ``<pool>-<n>`` with the lowest
    ``n`` not taken, admitted as the apiserver would, and carrying the pool's cache and
    data-locality preferences as the decision service places them. A manifest file has no queue
    lag, so no pool is scaled; ``warnings`` gets one note per pool saying so."""

    policies = (*bundle.priority_classes, *bundle.limit_ranges)
    created: list[PodManifest] = []
    notes: list[str] = warnings if warnings is not None else []
    specs = bound_specs(bundle, notes)
    for manifest in sorted(bundle.agent_pools, key=lambda p: (p.namespace, p.name)):
        pool = AgentPool(manifest.namespace, manifest.name, specs[(manifest.namespace, manifest.name)])
        mine = [
            item.pod.name
            for item in bundle.pods
            if item.pod.namespace == pool.namespace
            and item.pod.labels.get(LABEL_AGENT_POOL) == pool.name
            and item.pod.phase not in ("Succeeded", "Failed")
        ]
        scalable = "tokensPerSecondPerReplica" in pool.spec and "ttftSloMs" in pool.spec
        try:
            policy = merge_cluster_spec(None, pool.spec) if scalable else AgentPoolSpec.model_validate(pool.spec)
        except ValueError as exc:
            raise InputError(f"AgentPool {pool.key}: spec: {exc}") from None
        missing = max(0, pool.initial_replicas - len(mine))
        taken, index = set(mine), 0
        for _ in range(missing):
            while f"{pool.name}-{index}" in taken:
                index += 1
            try:
                replica = replica_admission(pool, index, policies)
            except ReplicaError as exc:
                raise InputError(str(exc)) from None
            created.append(PodManifest(with_preferences(replica.pod, policy), replica.resources, replica.rejection))
            index += 1
        if warnings is not None:
            notes.append(
                f"AgentPool {pool.key}: {missing} replica(s) created to reach {pool.initial_replicas} "
                f"({len(mine)} in the file); scaling follows queue lag, which a file does not have"
            )
    return created


def run(documents: Sequence[Any], config: Path | None = None) -> Report:
    """Admit and schedule the objects of one file; raises ManifestError for invalid input."""
    bundle = load_documents(documents)
    nodes = {node.name for node in bundle.nodes}
    bound: list[PodManifest] = []
    pending: list[PodManifest] = []
    for item in bundle.pods:
        if item.pod.phase in ("Succeeded", "Failed"):
            continue  # finished pods hold nothing and are not scheduled
        if item.pod.node_name:
            if item.pod.node_name not in nodes:
                raise ManifestError(
                    f"Pod {item.pod.key}", "spec.nodeName", f"node {item.pod.node_name!r} is not defined in the input"
                )
            bound.append(item)
        else:
            pending.append(item)
    warnings = list(bundle.warnings)
    # Pools' replicas are created after the file's pods (the controller reacts to the pool).
    pending += pool_replicas(bundle, warnings)
    report = Report(running=len(bound), warnings=tuple(warnings))

    # Admission happens when pods are created, i.e. in input order, before any scheduling.
    ledger = QuotaLedger.of(bundle.resource_quotas)
    for item in bound:
        ledger = ledger.charge(item.pod.namespace, item.pod.priority_class_name, item.resources)
    admitted: list[PodManifest] = []
    for item in pending:
        if item.rejection:
            report.outcomes.append(Outcome(item.pod.key, None, (), item.rejection))
            report.rejected += 1
            continue
        decision = ledger.admit(item.pod.name, item.pod.namespace, item.pod.priority_class_name, item.resources)
        if not decision.admitted:
            report.outcomes.append(Outcome(item.pod.key, None, (), decision.message or ""))
            report.rejected += 1
            continue
        ledger = decision.ledger
        admitted.append(item)

    # A gated pod is created (and charged to quota) but no scheduler tries it until its gates go.
    for item in admitted:
        if item.scheduling_gates:
            report.outcomes.append(Outcome(item.pod.key, None, (), messages.SCHEDULING_GATED))
            report.gated += 1
    session = Session.of(
        bundle.nodes,
        [b.pod for b in bound],
        config=load_scheduler_config(config),
        policies=_policy_events(bundle),
        namespaces=bundle.namespaces,
    )
    session.pool_limits = pool_scoring_limits(bundle)
    start = time.perf_counter()
    outcomes = session.schedule_all([a.pod for a in admitted if not a.scheduling_gates])
    report.seconds = time.perf_counter() - start + 0.0
    report.outcomes += outcomes
    return report


def pool_scoring_limits(bundle: ManifestBundle) -> dict[tuple[str, str], int]:
    """(namespace, AgentPool) → its ``fastScheduling.maxNodesToScore``, for the pools that set one."""
    limits: dict[tuple[str, str], int] = {}
    for manifest in bundle.agent_pools:
        limit = max_nodes_to_score(AgentPoolSpec.model_validate(dict(manifest.spec)))
        if limit is not None:
            limits[(manifest.namespace, manifest.name)] = limit
    return limits


def without_scheduler_configs(
    documents: Sequence[Any], origins: Sequence[tuple[str, int]], warnings: list[str]
) -> tuple[list[Any], list[tuple[str, int]]]:
    """The documents that are not scheduler configurations (a directory such as ``examples/``
    holds one beside the manifests): those are skipped, with a warning saying to pass them with
    ``--config``."""
    kept: list[Any] = []
    kept_origins: list[tuple[str, int]] = []
    for document, (name, index) in zip(documents, origins, strict=True):
        if isinstance(document, dict) and document.get("kind") in CONFIG_KINDS:
            warnings.append(
                f"{name}: document {index}: skipped a {document['kind']} (a scheduler configuration, "
                f"not a cluster object): pass it with --config {name}"
            )
            continue
        kept.append(document)
        kept_origins.append((name, index))
    return kept, kept_origins


def _simulate_one(sources: Sequence[Source], config: Path | None, tag: str | None) -> int:
    """Schedule ``sources`` as one cluster and print the outcomes (each line with ``"file":
    tag`` when given); returns the exit status, printing the error if any."""
    documents, origins = _documents_of(sources)
    warnings: list[str] = []
    kept, origins = without_scheduler_configs(documents, origins, warnings)
    if documents and not kept:  # only a scheduler configuration: nothing to schedule, say so only
        for warning in warnings:
            print(f"warning: {warning}", file=sys.stderr)
        return 0
    documents = kept
    try:
        report = run(documents, config)
    except NoInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_NO_INPUT
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except ManifestError as exc:
        print(f"error: {locate_error(exc, documents, origins)}", file=sys.stderr)
        return EXIT_INVALID
    for warning in (*warnings, *report.warnings):
        print(f"warning: {warning}", file=sys.stderr)
    extra = {"file": tag} if tag is not None else {}
    out = sys.stdout
    for outcome in report.outcomes:
        out.write(json.dumps({**outcome.to_json(), **extra}, sort_keys=False) + "\n")
    out.write(json.dumps({"summary": report.summary(), **extra}) + "\n")
    out.flush()
    return 0


def simulate(
    files: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Manifests: files (multi-document YAML, or JSON: an object or a v1 List), directories "
            "or - for standard input; same as -f.",
            show_default=False,
        ),
    ] = None,
    filename: Annotated[
        list[Path] | None,
        typer.Option(
            "--filename",
            "-f",
            help="A file, a directory (its *.yaml, *.yml and *.json files, sorted) "
            "or - for standard input; repeatable, read after FILES, in order.",
            show_default=False,
        ),
    ] = None,
    recursive: Annotated[
        bool, typer.Option("--recursive", "-R", help="Read the directories' subdirectories too.")
    ] = False,
    each: Annotated[
        bool,
        typer.Option(
            "--each",
            help="Simulate every file as a cluster of its own (as the files in examples/ are); "
            'each output line then carries "file".',
        ),
    ] = False,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", help="Scheduler configuration (KubeSchedulerConfiguration keys); default: Berth's profile."
        ),
    ] = None,
) -> None:
    """Schedule the pending pods of manifest files offline and print one JSON line per outcome.

    All inputs together are one cluster (like one `kubectl apply -f A -f B`): objects of one file
    may refer to those of another; with --each every file is a cluster of its own. Exit status:
    0 whatever was placed; 2 for input Berth cannot accept (the message names the file, document
    and field); 3 when there is nothing to read (a missing path, a directory without manifests).
    """
    try:
        sources = load_sources([*(files or ()), *(filename or ())], recursive=recursive)
        load_scheduler_config(config)  # a bad --config is reported once, before any output
    except NoInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_NO_INPUT) from None
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_INVALID) from None
    if not each:
        code = _simulate_one(sources, config, None)
    else:
        # Like kubectl: a file that fails does not stop the others; the status reports it.
        codes = [_simulate_one([source], config, source.name) for source in sources]
        code = max(codes, default=0)
    if code:
        raise typer.Exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m berth.simulate [FILE ...] [-f PATH ...] [-R] [--config FILE]``."""
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command()(simulate)
    try:
        # Without standalone mode click returns an Exit's code instead of calling sys.exit.
        result = app(args=list(argv) if argv is not None else None, standalone_mode=False)
    except typer.Exit as exc:
        return exc.exit_code
    except click.UsageError as exc:
        exc.show()
        return 2
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
