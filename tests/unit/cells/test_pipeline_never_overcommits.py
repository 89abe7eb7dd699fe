"""The pure pipeline — inventory folds, two decision cells with the real engine, the binder's order of
operations and the simulated cluster — run in process with bindings applied late and out of order.

It found a cell giving away the room of a preemption victim that was itself still in flight (its
PodInfo named no node yet, so its node was not kept for the preemptor): the simulated cluster then
counted overcommitted binds.
"""

from __future__ import annotations

import heapq
import random
from typing import Any

from berth.schemas import CommandResult, HandOverPod, InputPosition, PlacePods, PodDeleted, PodObserved
from berth.schemas.samples import T0
from berth_dev.cluster_sim.player import policy_observed
from berth_dev.cluster_sim.state import ClusterState
from berth_dev.workloads import from_documents, generated_documents, pool_policies

from berth.cells import Cell, CellConfig
from berth.cells.pools import parse_pools
from services.inventory.fold import NodeInput, ToCell, ToNode, fold_node_input, fold_pod_input, route_policy

CELLS = 2


class Pipeline:
    """Steps advance one pod arrival at a time; commands apply 1..``max_delay`` steps after they
    were decided (in any order, as the binder's concurrent workers may), pods run ``run_steps``."""

    def __init__(self, *, seed: int, max_delay: int, run_steps: int) -> None:
        self.workload = from_documents(generated_documents("demo:1"), name="demo")
        pools = parse_pools(pool_policies(self.workload))
        self.cluster = ClusterState(self.workload.policies)
        config = CellConfig(pools=pools)
        self.cells = [Cell(c, config) for c in range(CELLS)]
        self.offsets = [0] * CELLS
        self.routes: dict[str, Any] = {}
        self.node_states: dict[str, Any] = {}
        self.rng = random.Random(seed)
        self.max_delay, self.run_steps = max_delay, run_steps
        self.step = 0
        self.hand_overs = 0
        self.unschedulable: list[str] = []
        """Every unschedulable decision's message, in order."""
        self._due: list[tuple[int, int, tuple[Any, ...]]] = []
        self._sequence = 0
        self.overcommits: list[tuple[str, str, str]] = []
        self.cluster.overcommit_listeners.append(
            lambda record, problem: self.overcommits.append((record.pod.key, record.pod.node_name or "", problem))
        )

    def _later(self, delay: int, action: tuple[Any, ...]) -> None:
        self._sequence += 1
        heapq.heappush(self._due, (self.step + delay, self._sequence, action))

    def _inventory(self, event: Any) -> None:
        work: list[tuple[str, Any]] = [
            ("pod", event)
            if isinstance(event, (PodObserved, PodDeleted, HandOverPod))
            else ("node", NodeInput.of(event))
        ]
        while work:
            stage, item = work.pop(0)
            if stage == "pod":
                uid = item.partition_key
                folded = fold_pod_input(self.routes.get(uid), item, CELLS)
                if folded.state is None:
                    self.routes.pop(uid, None)
                else:
                    self.routes[uid] = folded.state
            else:
                folded = fold_node_input(self.node_states.get(item.node), item, CELLS)
                self.node_states[item.node] = folded.state
            for output in folded.outputs:
                if isinstance(output, ToCell):
                    self._cell(output.cell, output.event)
                elif isinstance(output, ToNode):
                    work.append(("node", output.payload))

    def _cell(self, cell: int, event: Any) -> None:
        position = InputPosition(topic="inputs", partition=cell, offset=self.offsets[cell])
        self.offsets[cell] += 1
        for decision in self.cells[cell].handle(event, position):
            if decision.record.outcome == "unschedulable":
                self.unschedulable.append(decision.record.message)
            for command in decision.commands:
                if isinstance(command, PlacePods):
                    self._later(self.rng.randint(1, self.max_delay), ("apply", command))
                elif isinstance(command, HandOverPod):  # the inventory acts on it, a little later
                    self.hand_overs += 1
                    self._later(self.rng.randint(1, 20), ("hand-over", command))

    def _apply(self, command: PlacePods) -> None:
        """What the binder does: evict the victims, then bind; report the result to the cell."""
        for victim, uid in zip(command.victims, command.victim_uids, strict=True):
            namespace, name = victim.split("/")
            for event in self.cluster.evict(namespace, name, T0, uid=uid).events:
                self._inventory(event)
        status = "applied"
        for placement in command.placements:
            annotations = (
                {"berth.io/gpu-devices": ",".join(map(str, placement.gpu_devices))} if placement.gpu_devices else {}
            )
            if placement.gpu_milli is not None:
                annotations["berth.io/gpu-milli"] = str(placement.gpu_milli)
            result = self.cluster.bind(
                placement.namespace, placement.name, placement.node, T0, uid=placement.pod_uid, annotations=annotations
            )
            for event in result.events:
                self._inventory(event)
            if result.ok:
                self._later(self.run_steps, ("finish", placement))
            else:
                status = "conflict"
        self._cell(
            command.cell,
            CommandResult(
                command_id=command.command_id,
                decision_id=command.decision_id,
                command_type=command.type,
                status=status,
                reason="" if status == "applied" else "not bound",
                applied_at=T0,
            ),
        )

    def _run_due(self) -> None:
        while self._due and self._due[0][0] <= self.step:
            _, _, (kind, item) = heapq.heappop(self._due)
            if kind == "apply":
                self._apply(item)
            elif kind == "hand-over":
                self._inventory(item)
            else:
                for event in self.cluster.delete_pod(item.namespace, item.name, T0, uid=item.pod_uid).events:
                    self._inventory(event)

    def run(self) -> None:
        for node in self.workload.nodes:
            for event in self.cluster.add_node(node, T0).events:
                self._inventory(event)
        for policy in self.workload.policies:
            for output in route_policy(policy_observed(policy, T0), CELLS):
                self._cell(output.cell, output.event)
        for timed in self.workload.pods:
            self.step += 1
            for event in self.cluster.create_pod(timed.pod, T0).events:
                self._inventory(event)
            self._run_due()
        while self._due:
            self.step += 1
            self._run_due()


def test_late_out_of_order_bindings_never_overcommit_a_node():
    pipeline = Pipeline(seed=1, max_delay=1000, run_steps=300)
    pipeline.run()
    assert pipeline.cluster.counters.pods_bound > 1000
    assert pipeline.cluster.counters.evictions > 0, "the run must exercise preemption"
    assert pipeline.hand_overs > 0, "the run must pass pods between cells"
    assert pipeline.overcommits == []
    # One writer per pod: no pod waits in two cells, and no cell gave up a pod it still holds.
    pending = [uid for cell in pipeline.cells for uid in cell.queue.pending]
    assert len(pending) == len(set(pending))
    assert not any(set(cell.queue.pending) & set(cell.handovers.handed_over) for cell in pipeline.cells)
    # As kube-scheduler's, every FitError counts every node of the cluster: pinned pods' through
    # the census of the other cells' nodes, the others' through their round of cells.
    nodes = len(pipeline.workload.nodes)
    fit_errors = [m for m in pipeline.unschedulable if m.startswith("0/")]
    assert fit_errors, "the run must leave pods unschedulable"
    assert {m.split(" ", 1)[0] for m in fit_errors} == {f"0/{nodes}"}
