"""``python -m bench.scaling --cache``: time-to-ready of new replicas with the placement engine's
cache-aware score term (``ModelCache``, :mod:`berth.core.plugins.cache`) on and off.

Four pools of four different models (one GPU a replica) share the bench's cluster (4 on-demand +
4 spot nodes of 8 H100s). Each pool follows Berth's replica timeline on the shipped trace (``x5``,
its own copy of the trace: the pure simulation's ``second_target``), starting at its initial
count; the pools' timelines are offset by a quarter of the hour from each other so that they do
not scale at the same second. Every new replica is placed by the real engine (``berth.simulate``'s
session, the built-in profile with or without ``ModelCache``); a scale-down removes the newest
replicas. A node has a model cached once a replica of it was placed there (and keeps it: node
disks hold every model, stated), or from the start for the seeded two nodes per model.

Time to ready (placement → serving): ``CACHED_LOAD_S`` 15 s with the model on the node's disk
(an 8B model's 16 GB at ~2 GB/s from local NVMe + ~7 s engine start) and ``COLD_LOAD_S`` 90 s
without (16 GB from object storage at ~200 MB/s + the engine start; the pool benchmark's model
load time).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

MODELS = ("llama-3-8b", "mistral-7b", "qwen2-7b", "gemma-2-9b")
CACHED_LOAD_S = 15.0
COLD_LOAD_S = 90.0
NAMESPACE = "serving"


@dataclass
class CacheResult:
    label: str
    replicas_started: int
    cached: int
    mean_ready_s: float
    p95_ready_s: float
    replica_seconds_loading: float

    def row(self) -> dict[str, Any]:
        return {
            "replicas_started": self.replicas_started,
            "on_a_cached_node": self.cached,
            "mean_time_to_ready_s": round(self.mean_ready_s, 1),
            "p95_time_to_ready_s": round(self.p95_ready_s, 1),
            "gpu_seconds_loading": round(self.replica_seconds_loading),
        }


def _with_model_cache(config: Any, weight: int | None) -> Any:
    """The profile with ModelCache's score weight set (None: the term removed)."""
    config = copy.deepcopy(config)

    def edit(value: Any) -> Any:
        if isinstance(value, dict):
            if value.get("name") == "ModelCache" and "weight" in value and weight is not None:
                return {**value, "weight": weight}
            return {k: edit(v) for k, v in value.items()}
        if isinstance(value, list):
            return [
                edit(v) for v in value if not (weight is None and isinstance(v, dict) and v.get("name") == "ModelCache")
            ]
        return value

    return edit(config)


def _node_documents(seed: int) -> tuple[list[dict[str, Any]], dict[str, set[str]]]:
    from berth_dev.workloads.generate import H100, gpu_node_manifest

    names = [f"od-{i}" for i in range(4)] + [f"spot-{i}" for i in range(4)]
    rng = np.random.Generator(np.random.PCG64(seed))
    cached: dict[str, set[str]] = {n: set() for n in names}
    for model in MODELS:
        for node in rng.choice(len(names), size=2, replace=False):
            cached[names[int(node)]].add(model)
    documents = [gpu_node_manifest(n, H100, zone="us-east-1a", spot=n.startswith("spot")) for n in names]
    return documents, cached


def _pod(model: str, index: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{model}-{index}", "namespace": NAMESPACE, "annotations": {"berth.io/model": model}},
        "spec": {
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "server",
                    "image": "vllm/vllm-openai",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "4", "memory": "32Gi"}},
                }
            ],
        },
    }


def timelines(seed: int) -> list[list[int]]:
    """Each pool's replica count per second: Berth's on the shipped trace x5, offset by 15 min each."""
    from .cluster import ClusterShape
    from .sim import RunConfig
    from .trace import SHIPPED_TRACE, load_trace
    from .trace_run import run_trace_policies, trace_scenario

    config = RunConfig(cluster=replace(ClusterShape(), interruptions=0))
    scene, _ = trace_scenario(load_trace(SHIPPED_TRACE), scale=5, seed=seed, config=config)
    base = run_trace_policies(scene, ("berth",))["berth"].second_target
    initial = scene.config.pool.initial_replicas
    out = []
    for k in range(len(MODELS)):
        shift = k * len(base) // len(MODELS)
        out.append([initial] + base[shift:] + base[:shift])
    return out


def run_cache(weight: int | None, seed: int = 42) -> CacheResult:
    """``weight``: ModelCache's score weight (the built-in profile's is 1); None: the term off."""
    from berth.kube.manifests import load_documents
    from berth.simulate import Session, load_scheduler_config

    node_docs, cached = _node_documents(seed)
    for doc in node_docs:
        doc["metadata"]["labels"]["berth.io/cached-models"] = ",".join(sorted(cached[doc["metadata"]["name"]]))
    config = _with_model_cache(load_scheduler_config(None), weight)
    bundle = load_documents(node_docs)
    session = Session.of(bundle.nodes, [], config=config)
    nodes = {n.name: n for n in bundle.nodes}
    running: dict[str, list[Any]] = {m: [] for m in MODELS}
    counter = {m: 0 for m in MODELS}
    ready_times: list[float] = []
    hits = 0
    pools = timelines(seed)

    def place(model: str, warm: bool) -> None:
        nonlocal hits
        counter[model] += 1
        [item] = load_documents([_pod(model, counter[model])]).pods
        outcome = session.place_one(item.pod)
        if outcome.node is None:
            return
        pod = item.pod.model_copy(update={"node_name": outcome.node})
        session.engine.upsert_bound_pod(pod)
        running[model].append(pod)
        if not warm:
            hit = model in cached[outcome.node]
            hits += hit
            ready_times.append(CACHED_LOAD_S if hit else COLD_LOAD_S)
        if model not in cached[outcome.node]:
            cached[outcome.node].add(model)
            node = nodes[outcome.node]
            labels = {**node.labels, "berth.io/cached-models": ",".join(sorted(cached[outcome.node]))}
            nodes[outcome.node] = node.model_copy(update={"labels": labels})
            session.engine.upsert_node(nodes[outcome.node])

    length = min(len(p) for p in pools)
    for t in range(length):
        for model, timeline in zip(MODELS, pools, strict=True):
            want = timeline[t]
            while len(running[model]) < want:
                before = len(running[model])
                place(model, warm=t == 0)
                if len(running[model]) == before:
                    break  # no room
            while len(running[model]) > want:
                session.engine.remove_pod(running[model].pop().uid)
    times = np.array(ready_times) if ready_times else np.zeros(1)
    label = "ModelCache off" if weight is None else f"ModelCache on, weight {weight}"
    return CacheResult(
        label, len(ready_times), hits, float(times.mean()), float(np.percentile(times, 95)), float(times.sum())
    )


def main(seed: int = 42, plot_dir: Path | None = None) -> None:
    import json

    from rich.console import Console
    from rich.table import Table

    results = [run_cache(1, seed), run_cache(None, seed), run_cache(10, seed)]
    table = Table(
        title=f"New replicas of 4 models ({', '.join(MODELS)}) following Berth on the trace x5; "
        f"load {CACHED_LOAD_S:g} s cached / {COLD_LOAD_S:g} s cold",
        title_justify="left",
    )
    for column in ("score", "replicas started", "on a cached node", "time to ready mean", "p95", "GPU-s loading"):
        table.add_column(column, justify="left" if column == "score" else "right")
    for r in results:
        table.add_row(
            r.label,
            str(r.replicas_started),
            f"{r.cached} ({r.cached / max(r.replicas_started, 1):.0%})",
            f"{r.mean_ready_s:.1f} s",
            f"{r.p95_ready_s:.0f} s",
            f"{r.replica_seconds_loading:,.0f}",
        )
    Console(width=150).print(table)
    print(json.dumps({"cache": {r.label: r.row() for r in results}}), flush=True)
