"""The faust services create their own internal topics before their worker starts."""

from __future__ import annotations

from berth.bus.streams import faust_app_options, internal_topics
from berth.bus.topics_admin import TopicSpec
from berth.settings import load_settings
from services.inventory.app import APP_ID, NODE_INPUTS, Layout, create_app


def test_the_inventory_owns_its_changelogs_and_its_rekeyed_node_stage():
    options = {**faust_app_options(load_settings(kafka="127.0.0.1:9").kafka), "store": "memory://"}
    app = create_app(Layout(cells=2, pod_partitions=3, node_partitions=5), app_options=options).app
    assert internal_topics(app) == [
        TopicSpec(NODE_INPUTS, 5),
        TopicSpec(f"{APP_ID}-nodes-changelog", 5, compacted=True),
        TopicSpec(f"{APP_ID}-pod-routes-changelog", 3, compacted=True),
    ]
