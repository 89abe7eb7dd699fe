"""The typed AgentPool spec: one model for the CRD, the pools file and the cell; clear errors."""

from __future__ import annotations

import pytest
from berth.schemas import AgentPoolSpecError, OwnerReference, PodInfo, parse_agent_pool_spec
from berth.schemas.cells import agent_pool_of, cell_of_pod, cell_of_pool
from berth.schemas.samples import T0

from berth.cells.pools import PoolPolicy, merge_cluster_spec, parse_pools
from berth.kube.manifests import ManifestError, agent_pool_from_manifest

SEED = {
    "model": "llama-70b",
    "replicas": 2,
    "minReplicas": 1,
    "maxReplicas": 16,
    "ttftSloMs": 2000,
    "tokensPerSecondPerReplica": 2500,
    "modelLoadTime": "90s",
    "gpuRequirements": {"count": 4, "type": "H100", "topology": {"locality": "nvlink"}},
    "scheduling": {
        "priority": 100,
        "costOptimization": {
            "spotEnabled": True,
            "maxSpotPercent": 50,
            "maxCostPerHour": 120,
            "sloHeadroomMs": 500,
            "fallbackModel": "llama-8b",
            "interruptionThreshold": {"count": 3, "window": "1h"},
        },
        "carbonAware": {
            "maxCarbonIntensity": 200,
            "preferredRegions": ["eu-north-1"],
            "timeShifting": {"enabled": True, "cleanEnergyHours": "09:00-17:00"},
        },
        "cacheAware": {"enabled": True, "cacheHitWeight": 0.3},
        "dataLocality": {"vectorStoreAffinity": ["weaviate-0"], "localityWeight": "high"},
    },
    "somethingFromALaterVersion": {"kept": True},
}


def test_the_seed_shape_parses_with_units_and_defaults():
    spec = parse_agent_pool_spec(SEED)
    assert spec.model_load_seconds == 90 and spec.initial_replicas == 2 and spec.scalable
    assert spec.cost is not None and spec.cost.interruption_threshold.window_seconds == 3600
    assert spec.carbon is not None and spec.carbon.time_shifting.hours()[0].hour == 9
    assert spec.scheduling.data_locality.locality_weight == "high"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"minReplicas": 5, "maxReplicas": 2}, "spec: minReplicas (5) must not exceed maxReplicas (2)"),
        (
            {"scheduling": {"costOptimization": {"maxSpotPercent": 150}}},
            "spec.scheduling.costOptimization.maxSpotPercent: Input should be less than or equal to 100",
        ),
        (
            {"scheduling": {"costOptimization": {"maxSpotPrecent": 50}}},
            "spec.scheduling.costOptimization.maxSpotPrecent: unknown field",
        ),
        (
            {"scheduling": {"costOptimization": {"sloHeadroomMs": 2500}}, "ttftSloMs": 2000},
            "sloHeadroomMs (2500) must be below ttftSloMs (2000)",
        ),
        ({"scheduling": {"carbonAware": {"timeShifting": {"cleanEnergyHours": "9-17"}}}}, "must be HH:MM-HH:MM"),
        ({"modelLoadTime": "soon"}, "'soon' is not a duration"),
        ({"gpuRequirements": {"count": 2, "fraction": 0.5}}, "either count"),
    ],
)
def test_bad_specs_say_where_and_what(change, message):
    with pytest.raises(AgentPoolSpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_agent_pool_spec({"ttftSloMs": 2000, "tokensPerSecondPerReplica": 1, **change})


def test_manifests_validate_agent_pools_and_keep_the_spec_verbatim():
    manifest = {
        "apiVersion": "berth.io/v1alpha1",
        "kind": "AgentPool",
        "metadata": {"name": "llama", "namespace": "serving"},
        "spec": SEED,
    }
    assert agent_pool_from_manifest(manifest).spec == SEED
    with pytest.raises(ManifestError, match="AgentPool serving/llama: spec: minReplicas"):
        agent_pool_from_manifest({**manifest, "spec": {"minReplicas": 3, "maxReplicas": 1}})


def test_pools_file_takes_both_key_styles_and_the_cluster_overrides_it():
    pools = parse_pools(
        {
            "pools": {
                "serving/llama": {
                    "tokens_per_second_per_replica": 100,
                    "ttft_slo_ms": 500,
                    "initial_replicas": 3,
                    "cooldown_s": 60,
                }
            }
        }
    )
    file_policy = pools["serving/llama"]
    assert (file_policy.initial_replicas, file_policy.cooldown_s) == (3, 60)
    merged = merge_cluster_spec(file_policy, {"maxReplicas": 4, "ttftSloMs": 250, "unknownKey": 1})
    assert (merged.ttft_slo_ms, merged.max_replicas, merged.tokens_per_second_per_replica) == (250, 4, 100)
    with pytest.raises(AgentPoolSpecError, match="tokensPerSecondPerReplica"):
        merge_cluster_spec(None, {"ttftSloMs": 250})
    with pytest.raises(ValueError, match="serving/llama.bogus: unknown field"):
        parse_pools({"pools": {"serving/llama": {"tokensPerSecondPerReplica": 1, "ttftSloMs": 1, "bogus": 1}}})
    assert PoolPolicy.model_validate(file_policy.model_dump(mode="json")) == file_policy


def test_replicas_route_to_their_pools_cell():
    owned = PodInfo(
        uid="u1",
        namespace="serving",
        name="llama-7",
        creation_time=T0,
        owner=OwnerReference(kind="AgentPool", name="llama", controller=True),
    )
    labelled = PodInfo(
        uid="u2", namespace="serving", name="x", creation_time=T0, labels={"berth.io/agent-pool": "llama"}
    )
    other = PodInfo(uid="u3", namespace="serving", name="y", creation_time=T0)
    assert agent_pool_of(owned) == agent_pool_of(labelled) == "serving/llama"
    assert agent_pool_of(other) is None
    for cells in (2, 7, 16):
        assert cell_of_pod(owned, cells) == cell_of_pod(labelled, cells) == cell_of_pool("serving", "llama", cells)
