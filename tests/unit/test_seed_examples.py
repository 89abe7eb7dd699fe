"""Every YAML example of the source documents (``../shared/seeds/*.txt``) that Berth should
understand, run through ``berth simulate`` (:func:`berth.simulate.main`, in process): each is
accepted, or refused with the reason kube-scheduler (or the apiserver in front of it) would give.

What is in scope — the objects ``berth simulate`` reads as kube-scheduler sees them:

- Pods, PriorityClasses, ResourceQuotas, LimitRanges: as written;
- Deployments: as the Pods their ReplicaSet would create (``spec.replicas`` copies of the
  template, named ``<name>-<i>``): kube-scheduler never sees a Deployment, only its pods;
- the KubeSchedulerConfiguration the seed ships in a ConfigMap: its ``data`` entry, as
  ``--config``;
- AgentPools: the seed's made-up group ``neuronetes.io/v1alpha1`` mapped to Berth's
  ``berth.io/v1alpha1`` (:data:`API_VERSIONS`), nothing else changed. Without the mapping the
  apiserver would refuse them (no such kind in that group), and so does Berth
  (``test_agentpool_under_the_seed_group_is_refused``).

Out of scope (:data:`OUT_OF_SCOPE`), with the reason; 002's ``DeschedulerPolicy`` sits in a shell
block (``cat <<EOF > advanced-scheduling.yaml``): :func:`test_the_seeds_descheduler_policy_runs`
takes it from there and runs it through ``berth deschedule``; blocks without ``apiVersion``/``kind``
(spec fragments such as a lone ``nodeSelector``) are illustrations, not objects, and are skipped.
:func:`test_every_seed_object_is_classified` fails when a seed gains an object this file does not
classify.

An example whose feature is not implemented would be asserted REFUSED with today's clear message,
its test id naming the missing feature (``needs-...``), so that the test fails — and must be
flipped to ``ACCEPTED`` — when the feature lands. The nine AgentPools of 004 are all accepted, and
:func:`test_the_nine_seed_agent_pools_run_together` runs them as one cluster; the tests after it
show simulate acting on their fields (docs/agentpool.md).
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from berth.simulate import main as simulate_main

SEEDS = Path(os.environ.get("BERTH_SEEDS_DIR", Path(__file__).resolve().parents[3] / "shared" / "seeds"))
if not SEEDS.is_dir():  # pragma: no cover - the source documents live beside the repository
    pytest.skip(f"no source documents at {SEEDS}", allow_module_level=True)

API_VERSIONS = {"neuronetes.io/v1alpha1": "berth.io/v1alpha1"}
"""The seed's made-up API group → Berth's (the only change made to an example)."""

OUT_OF_SCOPE = {
    "DaemonSet": "placed by the DaemonSet controller, one pod per node pinned with a matchFields "
    "node affinity; the seeds' are the device plugin and DCGM exporter, no workload",
    "ConfigMap": "not a scheduling input (the device-plugin sharing config); the one carrying a "
    "KubeSchedulerConfiguration is read as --config (case 003:1073)",
    "Job": "batch.volcano.sh: Volcano's own scheduler and gang model; Berth's gang is a PodGroup",
    "ResourceFlavor": "kueue.x-k8s.io: Kueue admits workloads before any scheduler sees them",
    "ClusterQueue": "kueue.x-k8s.io: Kueue admission, not scheduling",
    "LocalQueue": "kueue.x-k8s.io: Kueue admission, not scheduling",
}


@dataclass(frozen=True)
class Block:
    ref: str  # "<seed number>:<line of the opening fence>"
    documents: tuple[dict[str, Any], ...]


def _blocks() -> dict[str, Block]:
    found: dict[str, Block] = {}
    for path in sorted(SEEDS.glob("*.txt")):
        text = path.read_text()
        for match in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.DOTALL | re.MULTILINE):
            try:
                documents = [d for d in yaml.safe_load_all(match.group(2)) if d is not None]
            except yaml.YAMLError:
                continue  # shell, Go, PromQL ... or YAML with "..." elisions
            objects = tuple(d for d in documents if isinstance(d, dict) and d.get("apiVersion") and d.get("kind"))
            if objects:
                ref = f"{path.name[:3]}:{text[: match.start()].count(chr(10)) + 1}"
                found[ref] = Block(ref, objects)
    return found


BLOCKS = _blocks()

ACCEPTED = None


@dataclass(frozen=True)
class Case:
    refs: tuple[str, ...]  # blocks run together as one cluster, in this order
    refused: str | None = ACCEPTED  # None: accepted; else a part of the error message
    config_from: str | None = None  # a block whose ConfigMap data is the --config
    config_edit: Callable[[dict[str, Any]], None] | None = None
    map_api_version: bool = True


def most_allocated_v134(config: dict[str, Any]) -> None:
    """The seed's bin-packing profile as a v1.34 configuration writes it (what Berth's error
    says): NodeResourcesFit at its weight, with scoringStrategy MostAllocated."""
    (profile,) = config["profiles"]
    for entry in profile["plugins"]["score"]["enabled"]:
        if entry["name"] == "NodeResourcesMostAllocated":
            entry["name"] = "NodeResourcesFit"
    profile["pluginConfig"] = [
        {
            "name": "NodeResourcesFit",
            "args": {
                "scoringStrategy": {
                    "type": "MostAllocated",
                    "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}],
                }
            },
        }
    ]


CASES: dict[str, Case] = {
    # 000: kube-native controls for LLM serving.
    "000:162-priorityclass": Case(("000:162",)),
    "000:310-deployment-h100": Case(("000:310",)),
    # A template without containers: the apiserver refuses the Deployment
    # (spec.template.spec.containers: Required value); Berth refuses its pods, as here.
    "000:332-deployment-multi-zone-without-containers": Case(
        ("000:332",), refused="spec.containers: must have at least one container"
    ),
    # 003: GPU pods, priorities, quotas, bin packing.
    "003:109-gpu-pod": Case(("003:109",)),
    "003:161-mps-pod": Case(("003:161",)),
    "003:204-training-a100": Case(("003:204",)),
    "003:273-training-pod": Case(("003:273",)),
    "003:329-training-worker": Case(("003:329",)),
    "003:380-deployment-model-server": Case(("003:380",)),
    "003:457-training-pod": Case(("003:457",)),
    "003:548-priorityclasses": Case(("003:548",)),
    "003:593-pods-with-their-priorityclasses": Case(("003:548", "003:593")),
    # kube's priority admission: `pods "production-inference" is forbidden: no PriorityClass ...`
    "003:593-pods-without-priorityclasses": Case(
        ("003:593",), refused="spec.priorityClassName: no PriorityClass with name critical-inference was found"
    ),
    "003:642-pod-with-its-priorityclass": Case(("003:548", "003:642")),
    "003:669-resourcequotas": Case(("003:669",)),
    "003:711-resourcequota": Case(("003:711",)),
    "003:738-resourcequota-scoped": Case(("003:738",)),
    "003:761-limitrange": Case(("003:761",)),
    # The "three tiers" pods have no containers: the apiserver says spec.containers: Required value.
    "003:962-pods-without-containers": Case(
        ("003:548", "003:962"), refused="spec.containers: must have at least one container"
    ),
    "003:1024-data-intensive-training": Case(("003:1024",)),
    # The apiserver's ValidateResourceRequirements: an extended resource needs limits = requests.
    "003:1097-gpu-request-without-limit": Case(
        ("003:548", "003:1097"),
        refused="spec.containers[0].resources.limits: Limit must be set for non overcommitable "
        "resources: nvidia.com/gpu",
    ),
    # The seed's bin-packing KubeSchedulerConfiguration uses a plugin removed in kube 1.24.
    "003:1073-config-legacy-NodeResourcesMostAllocated": Case(
        ("003:109",),
        config_from="003:1073",
        refused="plugin 'NodeResourcesMostAllocated' was removed from kube-scheduler; its v1.34 "
        "equivalent is NodeResourcesFit with pluginConfig args scoringStrategy: "
        "{type: MostAllocated",
    ),
    "003:1073-config-as-v1.34-writes-it": Case(("003:109",), config_from="003:1073", config_edit=most_allocated_v134),
    # 004: AgentPools (apiVersion mapped to berth.io/v1alpha1).
    "004:48-agentpool-tensor-parallel": Case(("004:48",)),
    "004:71-agentpool-small-model": Case(("004:71",)),
    "004:94-agentpool-pipeline-parallel": Case(("004:94",)),
    "004:306-agentpool-green": Case(("004:306",)),
    "004:334-agentpool-rag": Case(("004:334",)),
    "004:508-agentpool-high-priority": Case(("004:508",)),
    "004:223-agentpool-cost-optimized-spotMaxInterruptions-fallbackTrigger": Case(("004:223",)),
    "004:271-agentpool-spot-spotStrategy": Case(("004:271",)),
    "004:360-agentpool-cached-preloadStrategy": Case(("004:360",)),
    # A ToolBinding's queueConfig joins the AgentPool its spec.agentPool names; the seed's names
    # none, so simulate accepts it with a warning (docs/agentpool.md).
    "004:202-toolbinding-queueConfig": Case(("004:202",)),
}


def _mapped(document: dict[str, Any]) -> dict[str, Any]:
    version = document.get("apiVersion")
    return {**document, "apiVersion": API_VERSIONS.get(version, version)}


def _as_scheduled(document: dict[str, Any]) -> list[dict[str, Any]]:
    """What kube-scheduler sees of an object: a Deployment's replicas as Pods."""
    if document.get("kind") != "Deployment":
        return [document]
    spec = document.get("spec") or {}
    template = spec.get("template") or {}
    name = document["metadata"]["name"]
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                **(template.get("metadata") or {}),
                "name": f"{name}-{i}",
                "namespace": document["metadata"].get("namespace", "default"),
            },
            "spec": template.get("spec") or {},
        }
        for i in range(int(spec.get("replicas", 1)))
    ]


def _run(case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    documents: list[dict[str, Any]] = []
    for ref in case.refs:
        for document in BLOCKS[ref].documents:
            if document["kind"] in OUT_OF_SCOPE:
                continue
            documents += _as_scheduled(_mapped(document) if case.map_api_version else document)
    manifests = tmp_path / "seed.yaml"
    manifests.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    argv = [str(manifests)]
    if case.config_from is not None:
        (config_map,) = BLOCKS[case.config_from].documents
        (text,) = config_map["data"].values()
        if case.config_edit is not None:
            edited = yaml.safe_load(text)
            case.config_edit(edited)
            text = yaml.safe_dump(edited, sort_keys=False)
        config = tmp_path / "config.yaml"
        config.write_text(text)
        argv += ["--config", str(config)]
    capsys.readouterr()
    code = simulate_main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_every_seed_object_is_classified() -> None:
    used = {ref for case in CASES.values() for ref in (*case.refs, case.config_from) if ref}
    unclassified = [
        f"{block.ref} {document['kind']}"
        for block in BLOCKS.values()
        for document in block.documents
        if block.ref not in used and document["kind"] not in OUT_OF_SCOPE
    ]
    assert not unclassified, f"seed objects with no case here: {unclassified}"
    assert set(CASES) and all(ref in BLOCKS for case in CASES.values() for ref in case.refs)


@pytest.mark.parametrize("name", sorted(CASES))
def test_seed_example(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = CASES[name]
    code, out, err = _run(case, tmp_path, capsys)
    if case.refused is ACCEPTED:
        assert code == 0, err
        lines = [json.loads(line) for line in out.splitlines() if line.strip()]
        summary = lines[-1]["summary"]
        pods = [line for line in lines[:-1] if "pod" in line]
        # Every pending pod got a decision (no nodes in a seed: kube's "no nodes available").
        assert summary["pods"] == len(pods)
    else:
        assert code == 2, (out, err)
        assert case.refused in err, err


def test_agentpool_under_the_seed_group_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(Case(("004:48",), map_api_version=False), tmp_path, capsys)
    assert code == 2 and "neuronetes.io/v1alpha1" in err, err


AGENT_POOLS = ("004:48", "004:71", "004:94", "004:223", "004:271", "004:306", "004:334", "004:360", "004:508")
"""The nine AgentPool examples of the NeuroNetes scheduler guide, in the order they appear."""


def _simulate(documents: list[dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    manifests = tmp_path / "cluster.yaml"
    manifests.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    capsys.readouterr()
    code = simulate_main([str(manifests)])
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines() if line.strip()], err


def _seed_documents(*refs: str) -> list[dict[str, Any]]:
    """Copies of the seed's objects (the apiVersion mapped), free to edit."""
    return [_mapped(copy.deepcopy(document)) for ref in refs for document in BLOCKS[ref].documents]


def _node(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}},
    }


def test_the_nine_seed_agent_pools_run_together(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert [BLOCKS[ref].documents[0]["kind"] for ref in AGENT_POOLS] == ["AgentPool"] * 9
    code, lines, err = _simulate(_seed_documents(*AGENT_POOLS, "004:202"), tmp_path, capsys)
    assert code == 0, err
    replicas = sorted(line["pod"] for line in lines[:-1])
    # One replica per pool, four for pipeline-parallel-pool (minReplicas: 4).
    assert len(replicas) == 12 and lines[-1]["summary"]["pods"] == 12
    names = {BLOCKS[ref].documents[0]["metadata"]["name"] for ref in AGENT_POOLS}
    assert {pod.split("/")[1].rsplit("-", 1)[0] for pod in replicas} == names
    assert "ToolBinding default/queue-binding names no AgentPool (spec.agentPool)" in err


def test_simulate_places_the_cached_pools_replica_on_its_preload_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = [_node("b-primary", **{"node-pool": "gpu-primary"}), _node("z-spare", **{"node-pool": "gpu-spare"})]
    code, lines, err = _simulate([*nodes, *_seed_documents("004:360")], tmp_path, capsys)
    assert code == 0, err
    assert [(line["pod"], line["node"]) for line in lines[:-1]] == [("default/cached-pool-0", "b-primary")]
    # The same pool without its preloadStrategy: nothing prefers b-primary (the tie is broken by
    # a hash of the pod's UID and the node's name, which favours z-spare here).
    (pool,) = _seed_documents("004:360")
    del pool["spec"]["scheduling"]["cacheAware"]["preloadStrategy"]
    code, lines, err = _simulate([*nodes, pool], tmp_path, capsys)
    assert code == 0, err
    assert lines[0]["node"] == "z-spare"


def test_simulate_caps_a_pools_cycle_at_its_max_nodes_to_score(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from berth.core.hashing import name_hash64
    from berth.kube.manifests.common import deterministic_uid

    nodes = [_node(f"n-{i}") for i in range(4)] + [_node("n-4", **{"node-pool": "gpu-primary"})]
    (pool,) = _seed_documents("004:360")
    _, lines, _ = _simulate([*nodes, pool], tmp_path, capsys)
    assert lines[0]["node"] == "n-4"  # the preload node, among all five
    pool["spec"]["scheduling"]["fastScheduling"] = {"enabled": True, "maxNodesToScore": 1}
    code, lines, err = _simulate([*nodes, pool], tmp_path, capsys)
    assert code == 0, err
    # One feasible node, the first from the start the replica's UID picks (kube's sampling, made
    # deterministic): the preload preference never sees n-4.
    start = name_hash64(deterministic_uid("Pod", "default", "cached-pool-0")) % 5
    assert start != 4
    assert lines[0]["node"] == f"n-{start}"


def test_a_tool_binding_gives_its_queue_config_to_the_pool_it_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (binding,) = _seed_documents("004:202")
    binding["spec"]["agentPool"] = "cached-pool"
    code, _, err = _simulate([*_seed_documents("004:360"), binding], tmp_path, capsys)
    assert code == 0 and "ToolBinding" not in err, err
    (pool,) = _seed_documents("004:360")
    pool["spec"]["queueConfig"] = {"autoscaleOnLag": False}
    code, _, err = _simulate([pool, binding], tmp_path, capsys)
    assert code == 2
    assert "ToolBinding default/queue-binding: spec.queueConfig: AgentPool default/cached-pool gives" in err
    binding["spec"]["queueConfig"]["maxLagThreshold"] = "many"
    code, _, err = _simulate([*_seed_documents("004:360"), binding], tmp_path, capsys)
    assert code == 2 and "ToolBinding default/queue-binding: spec: queueConfig.maxLagThreshold" in err, err


def test_the_agentpools_example(capsys: pytest.CaptureFixture[str]) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "agentpools" / "cluster.yaml"
    capsys.readouterr()
    code = simulate_main([str(example)])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    # cached-pool on its preload node; mistral on the node whose berth.io/cached-models lists it.
    assert [(line["pod"], line["node"]) for line in lines[:-1]] == [
        ("default/cached-pool-0", "gpu-b"),
        ("default/mistral-0", "gpu-c"),
    ]
    assert "ToolBinding" not in err  # it names its pool


def _heredoc_documents() -> list[dict[str, Any]]:
    """The objects of the seeds' shell here-documents (``<<EOF`` ... ``EOF``)."""
    found = []
    for path in sorted(SEEDS.glob("*.txt")):
        for match in re.finditer(r"<<\s*'?EOF'?[^\n]*\n(.*?)^EOF$", path.read_text(), re.DOTALL | re.MULTILINE):
            try:
                documents = list(yaml.safe_load_all(match.group(1)))
            except yaml.YAMLError:
                continue
            found += [d for d in documents if isinstance(d, dict) and d.get("kind")]
    return found


def test_the_seeds_descheduler_policy_runs(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from berth.cli import app

    [policy] = [d for d in _heredoc_documents() if d["kind"] == "DeschedulerPolicy"]
    assert policy["apiVersion"] == "descheduler/v1alpha1"  # as the seed writes it, unchanged
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy, sort_keys=False))
    cluster = Path(__file__).resolve().parents[2] / "examples" / "descheduling" / "cluster.yaml"
    result = CliRunner().invoke(app, ["deschedule", "--policy", str(path), str(cluster)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    summary = lines[-1]["summary"]
    assert summary["evictions"] == len(lines) - 1
    # Only the seed's two strategies act: the example's taint and GPU fragments are not its business.
    assert {line["strategy"] for line in lines[:-1]} <= {
        "RemovePodsViolatingInterPodAntiAffinity",
        "LowNodeUtilization",
    }
