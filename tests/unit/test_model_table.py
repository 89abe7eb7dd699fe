"""ModelTable: a faust table of JSON bytes seen as pydantic values, each decoded once while the
table keeps the bytes it came from. A dict stands in for the faust table (same mapping methods)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, TypeAdapter

from berth.bus.streams import ModelTable


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


def test_keys_the_table_lost_are_forgotten():
    table: dict[str, bytes] = {}
    routes = ModelTable(table, TypeAdapter(Route))
    for index in range(5000):
        routes.put(f"pod-{index}", Route(cell=index % 2))
        table.pop(f"pod-{index}")  # partitions handed to another worker: gone without a put
    assert len(routes._decoded) <= 2 * len(table) + 1024
