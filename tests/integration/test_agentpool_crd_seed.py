"""The chart's AgentPool CRD on a real kube-apiserver keeps every field of the seed's nine AgentPool
examples: nothing the decision cell acts on (spotMaxInterruptions, fallbackTrigger, spotStrategy,
preloadStrategy, ...) is pruned on the way in, and what the apiserver stores reads back as the same
policy (the CRD's defaults are the model's)."""

from __future__ import annotations

import copy
import os
import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from berth.schemas.agentpool import AgentPoolSpec
from kubernetes.client import ApiClient, ApiextensionsV1Api, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "deploy" / "helm" / "berth" / "crds" / "agentpools.berth.io.yaml"
SEED = Path(os.environ.get("BERTH_SEEDS_DIR", ROOT.parent / "shared" / "seeds")) / "004_2c430fd10453cf9e.txt"


def seed_agent_pools() -> list[dict[str, Any]]:
    """The seed's AgentPool objects, apiVersion mapped to berth.io/v1alpha1."""
    pools = []
    for block in re.findall(r"^```yaml\n(.*?)^```", SEED.read_text(), re.DOTALL | re.MULTILINE):
        for document in yaml.safe_load_all(block):
            if isinstance(document, dict) and document.get("kind") == "AgentPool":
                pools.append({**copy.deepcopy(document), "apiVersion": "berth.io/v1alpha1"})
    return pools


def apply_crd(client: ApiClient) -> None:
    api = ApiextensionsV1Api(client)
    body = yaml.safe_load(CRD.read_text())
    try:
        api.create_custom_resource_definition(body)
    except ApiException as exc:
        if exc.status != 409:
            raise
        current = api.read_custom_resource_definition(body["metadata"]["name"])
        body["metadata"]["resourceVersion"] = current.metadata.resource_version
        api.replace_custom_resource_definition(body["metadata"]["name"], body)
    deadline = time.monotonic() + 30
    while True:
        conditions = api.read_custom_resource_definition(body["metadata"]["name"]).status.conditions or []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            return
        assert time.monotonic() < deadline, "the AgentPool CRD is not Established within 30 s"
        time.sleep(0.2)


def contains(stored: Any, written: Any, path: str = "spec") -> list[str]:
    """Where ``stored`` lost or changed something ``written`` has (extra defaulted keys are fine)."""
    if isinstance(written, dict):
        if not isinstance(stored, dict):
            return [path]
        return [p for key, value in written.items() for p in contains(stored.get(key), value, f"{path}.{key}")]
    return [] if stored == written else [path]


@pytest.mark.skipif(not SEED.is_file(), reason="the source documents live beside the repository")
def test_the_seed_agent_pools_keep_every_field_through_the_apiserver(kube_apiserver) -> None:
    pools = seed_agent_pools()
    assert len(pools) == 9
    client = kube_apiserver.api_client()
    apply_crd(client)
    namespace = f"seed-{uuid.uuid4().hex[:8]}"
    CoreV1Api(client).create_namespace({"metadata": {"name": namespace}})
    custom = CustomObjectsApi(client)
    try:
        for pool in pools:
            name = pool["metadata"]["name"]
            # Strict field validation: an unknown or pruned field is an error, not a silent drop.
            custom.create_namespaced_custom_object(
                "berth.io", "v1alpha1", namespace, "agentpools", pool, field_validation="Strict"
            )
            stored = custom.get_namespaced_custom_object("berth.io", "v1alpha1", namespace, "agentpools", name)
            assert contains(stored["spec"], pool["spec"]) == [], name
            assert AgentPoolSpec.model_validate(stored["spec"]) == AgentPoolSpec.model_validate(pool["spec"]), name
    finally:
        CoreV1Api(client).delete_namespace(namespace)
