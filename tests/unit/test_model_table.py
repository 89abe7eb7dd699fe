"""ModelTable: a faust table of JSON bytes seen as pydantic values, each decoded once while the
table keeps the bytes it came from. A dict stands in for the faust table (same mapping methods)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, TypeAdapter

from berth.bus.streams import DECODED_KEPT, ModelTable


class Route(BaseModel):
    model_config = ConfigDict(frozen=True)
    cell: int


def test_a_value_is_decoded_once_while_the_table_holds_the_same_bytes():
    table: dict[str, bytes] = {}
    routes = ModelTable(table, TypeAdapter(Route))
    routes.put("pod-a", Route(cell=1))
    first = routes.get("pod-a")
    assert first == Route(cell=1)
    assert routes.get("pod-a") is first
    table["pod-a"] = b'{"cell": 2}'  # as a changelog restore writes it, behind the view's back
    assert routes.get("pod-a") == Route(cell=2)
    routes.put("pod-a", None)
    assert routes.get("pod-a") is None and "pod-a" not in table


def test_only_the_most_recently_used_values_are_kept_decoded():
    table: dict[str, bytes] = {}
    routes = ModelTable(table, TypeAdapter(Route))
    routes.put("pod-0", Route(cell=0))
    kept = routes.get("pod-0")
    for index in range(1, DECODED_KEPT + 100):
        routes.put(f"pod-{index}", Route(cell=index % 2))
        if index % 1000 == 0:
            assert routes.get("pod-0") is kept  # used again: stays
    assert len(routes._decoded) == DECODED_KEPT
    assert routes.get("pod-1") == Route(cell=1) and routes.get("pod-1") is routes.get("pod-1")
    assert routes.get("pod-0") == kept
