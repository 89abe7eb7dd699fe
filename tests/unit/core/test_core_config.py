"""Configuration: the document, kube's merge rules, errors that name their path, the hash."""

from __future__ import annotations

import textwrap

import pytest
import yaml

from berth.configfiles import load_config
from berth.core.config import LEGACY_PLUGINS, ConfigError, default_config, parse_config

HEADER = "apiVersion: berth.io/v1alpha1\nkind: BerthSchedulerConfiguration\n"


def _load(body: str):
    return load_config(HEADER + textwrap.dedent(body))


def test_default_profile_follows_kube_order_and_weights() -> None:
    profile = default_config().profile("berth")
    kube_filters = (
        "NodeUnschedulable",
        "NodeName",
        "TaintToleration",
        "NodeAffinity",
        "NodeResourcesFit",
        "PodTopologySpread",
        "InterPodAffinity",
    )
    assert profile.points["filter"][: len(kube_filters)] == kube_filters
    assert profile.points["preFilter"][:4] == (
        "NodeAffinity",
        "NodeResourcesFit",
        "PodTopologySpread",
        "InterPodAffinity",
    )
    kube_weights = {
        "TaintToleration": 3,
        "NodeAffinity": 2,
        "NodeResourcesFit": 1,
        "PodTopologySpread": 2,
        "InterPodAffinity": 2,
        "NodeResourcesBalancedAllocation": 1,
    }
    assert {k: v for k, v in profile.weights.items() if k in kube_weights} == kube_weights
    # Berth's GPU, locality and preemption plugins come after kube's.
    assert "GpuDeviceFit" in profile.points["filter"] and "GpuDeviceFit" in profile.points["reserve"]
    assert profile.points["postFilter"] == ("DynamicResources", "DefaultPreemption")  # kube v1.34's order
    assert profile.keep_top_scores == 10
    fit = profile.args["NodeResourcesFit"]
    assert fit.gpu_scoring_strategy.type == "MostAllocated"  # type: ignore[attr-defined]  # the GPU strategy is configured in this test


def test_document_without_profiles_gets_the_default_profile() -> None:
    config = load_config(HEADER)
    assert [p.scheduler_name for p in config.profiles] == ["berth"]
    assert config.hash == default_config().hash


def test_kube_api_version_and_ignored_kube_fields_are_accepted() -> None:
    config = load_config(
        textwrap.dedent("""\
        apiVersion: kubescheduler.config.k8s.io/v1
        kind: KubeSchedulerConfiguration
        parallelism: 16
        profiles:
          - schedulerName: berth
        """)
    )
    assert config.hash == default_config().hash


def test_percentage_of_nodes_to_score_is_resolved_per_profile() -> None:
    # Acted on (tests/unit/core/test_nodes_to_score.py): it changes the configuration's hash.
    config = load_config(
        textwrap.dedent("""\
        apiVersion: kubescheduler.config.k8s.io/v1
        kind: KubeSchedulerConfiguration
        percentageOfNodesToScore: 50
        profiles:
          - schedulerName: berth
          - schedulerName: other
            percentageOfNodesToScore: 0
        """)
    )
    assert [p.percentage_of_nodes_to_score for p in config.profiles] == [50, 0]
    assert config.hash != default_config().hash


def test_score_weight_override_replaces_the_default_in_place() -> None:
    config = _load("""\
        profiles:
          - schedulerName: berth
            plugins:
              score:
                enabled:
                  - {name: NodeResourcesBalancedAllocation, weight: 5}
        """)
    profile = config.profile()
    assert profile.weights["NodeResourcesBalancedAllocation"] == 5
    assert profile.weights["GpuBinPack"] == 2
    # Explicit entries of a point come first, then multiPoint's (kube's expansion order).
    assert profile.points["score"][0] == "NodeResourcesBalancedAllocation"
    assert config.hash != default_config().hash


def test_disable_one_point_or_everything() -> None:
    profile = _load("""\
        profiles:
          - schedulerName: berth
            plugins:
              score:
                disabled: [{name: NodeResourcesBalancedAllocation}]
              filter:
                disabled: [{name: "*"}]
                enabled: [{name: NodeResourcesFit}]
        """).profile()
    assert "NodeResourcesBalancedAllocation" not in profile.points["score"]
    # Disabling at score does not disable its PreScore (kube treats points independently).
    assert "NodeResourcesBalancedAllocation" in profile.points["preScore"]
    assert profile.points["filter"] == ("NodeResourcesFit",)
    assert "NodeAffinity" in profile.points["preFilter"]


def test_several_profiles_and_plugin_args() -> None:
    config = _load("""\
        profiles:
          - schedulerName: berth
          - schedulerName: packer
            keepTopScores: 3
            pluginConfig:
              - name: NodeResourcesFit
                args:
                  scoringStrategy:
                    type: MostAllocated
                    resources: [{name: cpu, weight: 1}, {name: memory, weight: 1}]
        """)
    packer = config.profile("packer")
    assert packer.keep_top_scores == 3
    assert packer.args["NodeResourcesFit"].scoring_strategy.type == "MostAllocated"  # type: ignore[attr-defined]  # NodeResourcesFit's own args
    # A user's pluginConfig replaces the built-in one: no GPU strategy unless given.
    assert packer.args["NodeResourcesFit"].gpu_scoring_strategy is None  # type: ignore[attr-defined]  # NodeResourcesFit's own args
    with pytest.raises(KeyError, match="packer"):
        config.profile("nope")


@pytest.mark.parametrize(
    "body, message",
    [
        (
            """\
     profiles:
       - plugins:
           score:
             enabled: [{name: NodeAffinity}, {name: NodeName}, {name: Foo}]
     """,
            "profiles[0].plugins.score.enabled[2].name: unknown plugin 'Foo'; known: ",
        ),
        (
            """\
     profiles:
       - plugins:
           score:
             enabled: [{name: NodeName}]
     """,
            "profiles[0].plugins.score.enabled[0].name: plugin 'NodeName' does not extend score",
        ),
        (
            """\
     profiles:
       - plugins:
           bind:
             enabled: [{name: DefaultBinder}]
     """,
            "profiles[0].plugins.bind: extension point not supported",
        ),
        (
            """\
     profiles:
       - pluginConfig:
           - name: NodeResourcesFit
             args: {scoringStrategy: {type: Fancy}}
     """,
            "profiles[0].pluginConfig[0].args.scoringStrategy.type: Input should be",
        ),
        (
            """\
     profiles:
       - plugins:
           score:
             enabled: [{name: TaintToleration, weight: 5000}]
     """,
            "profiles[0].plugins.score.enabled[0].weight: must be between 0 and 1000",
        ),
        (
            """\
     profiles:
       - schedulerName: a
       - schedulerName: a
     """,
            "profiles[1].schedulerName: duplicate profile 'a'",
        ),
        (
            """\
     extenders: []
     """,
            "extenders: scheduler extenders are not supported",
        ),
        (
            """\
     profiles:
       - schedulerName: berth
         plugns: {}
     """,
            "profiles[0].plugns: Extra inputs are not permitted",
        ),
    ],
)
def test_errors_name_the_path(body: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(body)
    assert any(error.startswith(message) for error in caught.value.errors), caught.value.errors


def test_unknown_plugin_error_lists_the_known_names() -> None:
    with pytest.raises(ConfigError) as caught:
        _load("profiles:\n  - plugins: {filter: {enabled: [{name: Foo}]}}\n")
    assert "known: " in caught.value.errors[0] and "NodeResourcesFit" in caught.value.errors[0]


def test_wrong_api_version_is_an_error() -> None:
    with pytest.raises(ConfigError, match="apiVersion"):
        load_config("apiVersion: v2\nkind: BerthSchedulerConfiguration\n")


def test_hash_is_over_the_resolved_configuration() -> None:
    # The same effective configuration written two ways has one hash.
    explicit = _load("""\
        profiles:
          - schedulerName: berth
            plugins:
              score:
                enabled: [{name: TaintToleration, weight: 3}]
        """)
    assert explicit.profile().weights == default_config().profile().weights
    assert len(explicit.hash) == 64 and explicit.canonical_json().startswith(b"{")


@pytest.mark.parametrize(
    ("legacy", "strategy"),
    [
        ("NodeResourcesMostAllocated", "MostAllocated"),
        ("NodeResourcesLeastAllocated", "LeastAllocated"),
        ("RequestedToCapacityRatio", "RequestedToCapacityRatio"),
    ],
)
def test_removed_kube_plugins_name_their_v1_34_equivalent(legacy: str, strategy: str) -> None:
    """kube-scheduler removed these in v1.23/1.24; the error says what replaced them, and what
    it says parses."""
    document = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [{"schedulerName": "berth", "plugins": {"score": {"enabled": [{"name": legacy, "weight": 5}]}}}],
    }
    with pytest.raises(ConfigError) as caught:
        parse_config(document)
    (error,) = caught.value.errors
    assert error.startswith(
        f"profiles[0].plugins.score.enabled[0].name: plugin {legacy!r} was "
        "removed from kube-scheduler; its v1.34 equivalent is NodeResourcesFit "
        f"with pluginConfig args scoringStrategy: {{type: {strategy}"
    )
    args = yaml.safe_load(LEGACY_PLUGINS[legacy].split("pluginConfig args ", 1)[1])
    profile = document["profiles"][0]
    profile["plugins"]["score"]["enabled"][0]["name"] = "NodeResourcesFit"
    profile["pluginConfig"] = [{"name": "NodeResourcesFit", "args": args}]
    resolved = parse_config(document).profile("berth")
    assert resolved.weights["NodeResourcesFit"] == 5
    assert resolved.args["NodeResourcesFit"].model_dump(by_alias=True)["scoringStrategy"]["type"] == strategy


def test_other_removed_kube_plugins_are_named_too() -> None:
    document = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [{"pluginConfig": [{"name": "SelectorSpread", "args": {}}]}],
    }
    with pytest.raises(
        ConfigError, match="SelectorSpread' was removed from kube-scheduler; its v1.34 equivalent is PodTopologySpread"
    ):
        parse_config(document)
