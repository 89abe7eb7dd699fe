"""The simulation: one pool, one day, one policy; 1 s control ticks, requests in continuous time.

Serving. A ready replica has ``slots_per_replica`` sequence slots; a request holds one slot for
``tokens / (tokens_per_second_per_replica / slots_per_replica)`` seconds. Requests wait FIFO for a
slot; their time to first token (TTFT) is that wait (the queueing delay; prefill and network add a
constant that no scaling policy changes). Requests that were running on a replica killed by a spot
reclaim are retried at once, ahead of the queue (their new wait counts as a new TTFT).

Replicas (a ReplicaSet's pods). The pool's spec is the policy's replica count plus any surge it
started on a spot notice. Missing replicas are created pending and placed as soon as a node has a
free GPU (:func:`~bench.scaling.cluster.choose_node`); a placed replica loads the model for
``model_load_seconds`` and then serves. Surplus replicas go in the ReplicaSet's order: pending,
then not ready, then ready, newest first. A GPU is counted (GPU-hours, cost) from placement to
removal, loading included.

Spot. At a notice the victim node is picked (:func:`~bench.scaling.cluster.pick_victim`) and the
policy may answer with surge replicas. If it does, the pool moves off the node as Berth's
decision cell does: the node is cordoned, the surge joins the spec, and each surge replica, as
soon as it is placed (bound — not ready: the cell does not wait for the model to load), evicts
one of the node's replicas, loading ones first (gracefully: its running requests finish) and
gives its surge back. At the deadline the node goes. Replicas still on it die: for a pool that
surged they are gone at once (their surge given back); otherwise they become unreachable — they
still count for the ReplicaSet, serve nothing and cost nothing — and are deleted, and so
recreated, ``recreate_delay_s`` later (the node controller noticing the node is gone). Requests
running on a replica that dies are retried. An interruption that hit the pool (the node held
replicas at the notice) is survived when no request was cut at the deadline and, right after
it, the pool has as many ready replicas as at the notice (or as the policy's count, if it
scaled down meanwhile).

SLO. Minute ``m`` is an SLO-violation minute when the 95th percentile (nearest rank) of its TTFT
samples exceeds the SLO. Its samples: every request that got its first slot during the minute
(its wait) and every request still waiting at the minute's end (its wait so far, a lower bound),
so a pool that serves nothing still violates. A minute without samples does not violate.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from .cluster import ClusterShape, Interruption, Node, build_nodes, choose_node, pick_victim, probe
from .policies import CapacityClass, PoolConfig, PoolView, ProbeSlot, Scale, ScalingPolicy, SpotNoticeView
from .workload import Workload

PENDING, LOADING, READY, UNREACHABLE = "pending", "loading", "ready", "unreachable"
_REMOVAL_ORDER = {PENDING: 0, UNREACHABLE: 1, LOADING: 2, READY: 3}
TTFT_BUCKET_S = 0.01
TTFT_BUCKETS = 60_000  # 10 ms buckets up to 600 s; the last bucket takes everything longer


@dataclass(frozen=True)
class RunConfig:
    pool: PoolConfig = field(default_factory=PoolConfig)
    cluster: ClusterShape = field(default_factory=ClusterShape)
    recreate_delay_s: float = 45.0
    """Node gone → its pods deleted and recreated: the node controller's 40 s grace + a few s."""
    slo_percentile: float = 0.95


@dataclass
class RunResult:
    policy: str
    slo_violation_minutes: int
    gpu_hours: float
    cost_usd: float
    scale_events: int
    interruptions_survived: int
    interruptions_hit: int
    requests: int
    requests_over_slo: int
    requests_retried: int
    ttft_p50_s: float
    ttft_p99_s: float
    peak_replicas: int
    spot_gpu_hours: float
    minute_violations: list[bool]
    minute_ready: list[int]
    target_changes: list[tuple[float, int, int]]
    """(second, from, to) of every change of the policy's replica count."""
    interruption_log: list[dict[str, object]]

    def summary(self) -> dict[str, float | int]:
        """The figures of the benchmark's JSON line for this policy."""
        return {"slo_violation_minutes": self.slo_violation_minutes, "gpu_hours": round(self.gpu_hours, 2),
                "cost_usd": round(self.cost_usd, 2), "scale_events": self.scale_events,
                "interruptions_survived": self.interruptions_survived}


class Replica:
    __slots__ = ("id", "state", "node", "ready_at", "capacity", "interruption")

    def __init__(self, rid: int, capacity: CapacityClass = "any") -> None:
        self.id = rid
        self.state = PENDING
        self.node: Node | None = None
        self.ready_at = math.inf
        self.capacity = capacity
        self.interruption: int | None = None


@dataclass
class _Move:
    """A pool leaving a reclaimed node: its replicas there, and the surge replicas not yet placed."""

    node: Node
    olds: list[Replica]
    surge: list[Replica]
    surge_left: int


class _Pool:
    """The replicas and the cluster of one run, with the GPU accounting."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.nodes = build_nodes(config.cluster)
        self.replicas: list[Replica] = []
        self.counts = {PENDING: 0, LOADING: 0, READY: 0, UNREACHABLE: 0}
        self.ready_heap: list[tuple[float, int, Replica]] = []
        self.next_id = 0
        self.gpus_spot = 0
        self.gpus_on_demand = 0

    def _set(self, replica: Replica, state: str) -> None:
        self.counts[replica.state] -= 1
        self.counts[state] += 1
        replica.state = state

    def _release(self, replica: Replica) -> None:
        node = replica.node
        if node is not None and replica.state in (LOADING, READY):
            gpus = self.config.pool.gpus_per_replica
            node.used -= gpus
            if node.spot:
                self.gpus_spot -= gpus
            else:
                self.gpus_on_demand -= gpus

    def create(self, count: int, capacity: tuple[CapacityClass, ...] = ()) -> list[Replica]:
        created = []
        for i in range(count):
            replica = Replica(self.next_id, capacity[i] if i < len(capacity) else "any")
            self.next_id += 1
            self.replicas.append(replica)
            self.counts[PENDING] += 1
            created.append(replica)
        return created

    def place_pending(self, now: float) -> None:
        gpus = self.config.pool.gpus_per_replica
        for replica in self.replicas:
            if replica.state != PENDING:
                continue
            node = choose_node(self.nodes, gpus, replica.capacity)
            if node is None:
                continue
            node.used += gpus
            if node.spot:
                self.gpus_spot += gpus
            else:
                self.gpus_on_demand += gpus
            replica.node = node
            replica.ready_at = now + self.config.pool.model_load_seconds
            self._set(replica, LOADING)
            heapq.heappush(self.ready_heap, (replica.ready_at, replica.id, replica))

    def promote_ready(self, now: float) -> bool:
        changed = False
        while self.ready_heap and self.ready_heap[0][0] <= now:
            _, _, replica = heapq.heappop(self.ready_heap)
            if replica.state == LOADING:
                self._set(replica, READY)
                changed = True
        return changed

    def remove(self, replica: Replica) -> None:
        self._release(replica)
        self.counts[replica.state] -= 1
        replica.state = "gone"
        self.replicas.remove(replica)

    def make_unreachable(self, replica: Replica, interruption: int) -> None:
        self._release(replica)
        replica.interruption = interruption
        self._set(replica, UNREACHABLE)

    @property
    def spot_replicas(self) -> int:
        return self.gpus_spot // self.config.pool.gpus_per_replica

    @property
    def usd_per_hour(self) -> float:
        cluster = self.config.cluster
        return self.gpus_spot * cluster.spot_usd_per_gpu_hour + self.gpus_on_demand * cluster.on_demand_usd_per_gpu_hour

    @property
    def alive(self) -> int:
        return self.counts[PENDING] + self.counts[LOADING] + self.counts[READY] + self.counts[UNREACHABLE]

    def reconcile(self, spec: int, now: float, capacity: tuple[CapacityClass, ...] = ()) -> None:
        """The ReplicaSet controller: create or delete replicas until ``spec`` of them exist
        (new ones take their capacity classes from ``capacity`` in order)."""
        alive = self.alive
        if alive < spec:
            self.create(spec - alive, capacity)
        elif alive > spec:
            victims = sorted(self.replicas, key=lambda r: (_REMOVAL_ORDER[r.state], -r.id))[: alive - spec]
            for replica in victims:
                self.remove(replica)
        self.place_pending(now)

    def on_node(self, node: Node) -> list[Replica]:
        return [r for r in self.replicas if r.node is node and r.state in (LOADING, READY)]

    def probe(self, count: int, capacity: CapacityClass) -> list[ProbeSlot]:
        gpus = self.config.pool.gpus_per_replica
        return [ProbeSlot(n.name, n.spot, n.usd_per_gpu_hour * gpus) for n in probe(self.nodes, gpus, count, capacity)]

    def per_node(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for replica in self.replicas:
            if replica.node is not None and replica.state in (LOADING, READY):
                counts[replica.node.name] = counts.get(replica.node.name, 0) + 1
        return counts


def _percentile_of_histogram(histogram: list[int], total: int, q: float) -> float:
    if total == 0:
        return 0.0
    rank = math.ceil(q * total)
    seen = 0
    for bucket, count in enumerate(histogram):
        seen += count
        if seen >= rank:
            return (bucket + 1) * TTFT_BUCKET_S
    return TTFT_BUCKETS * TTFT_BUCKET_S


def minute_violates(samples: int, over_slo: int, percentile: float) -> bool:
    """Nearest-rank percentile over the SLO ⟺ more than ``samples - ceil(percentile × samples)``
    samples exceed it."""
    return samples > 0 and over_slo > samples - math.ceil(percentile * samples)


def simulate(workload: Workload, policy: ScalingPolicy, interruptions: tuple[Interruption, ...],
             config: RunConfig | None = None, progress: Callable[[float], None] | None = None) -> RunResult:
    """Run ``policy`` over ``workload``; deterministic (no clock, no randomness of its own)."""
    config = config or RunConfig()
    cfg = config.pool
    slo_s = cfg.ttft_slo_ms / 1000.0
    slots = cfg.slots_per_replica
    seq_rate = cfg.tokens_per_second_per_replica / slots
    duration = workload.shape.duration_s

    pool = _Pool(config)
    pool.create(cfg.initial_replicas)
    pool.place_pending(-cfg.model_load_seconds)  # warm start: ready at midnight
    pool.promote_ready(0.0)
    base_target = cfg.initial_replicas
    surge = 0
    view = PoolView()
    view.probe = pool.probe

    arrivals = workload.arrivals.tolist()
    tokens = workload.tokens.tolist()
    n_requests = len(arrivals)
    ai = 0
    queue: deque[tuple[float, int]] = deque()
    retries: deque[tuple[float, int]] = deque()
    waiting_tokens = 0
    running: list[tuple[float, int]] = []
    histogram = [0] * (TTFT_BUCKETS + 1)
    served = over_slo_total = retried = 0
    busy_total = ready_slot_total = waiting_total = 0.0
    gpu_s_spot = gpu_s_od = 0.0
    minute_samples = minute_over = 0
    minute_violations: list[bool] = []
    minute_ready: list[int] = []
    target_changes: list[tuple[float, int, int]] = []
    scale_events = 0
    peak = pool.alive

    notices = sorted(interruptions, key=lambda i: i.notice_at)
    notice_at = {int(i.notice_at): idx for idx, i in enumerate(notices)}
    deadlines: dict[int, int] = {}
    deletions: dict[int, int] = {}
    returns: dict[int, Node] = {}
    log: dict[int, dict[str, object]] = {}
    moves: dict[int, _Move] = {}

    def start_oldest(at: float) -> None:
        """Give a free slot, at time ``at``, to the oldest waiting request (retries first),
        counting its time to first token."""
        nonlocal waiting_tokens, served, minute_samples, over_slo_total, minute_over
        arrived, tok = retries.popleft() if retries else queue.popleft()
        waiting_tokens -= tok
        ttft = at - arrived
        histogram[min(int(ttft / TTFT_BUCKET_S), TTFT_BUCKETS)] += 1
        served += 1
        minute_samples += 1
        if ttft > slo_s:
            over_slo_total += 1
            minute_over += 1
        heapq.heappush(running, (at + tok / seq_rate, tok))

    def advance_moves() -> None:
        """Each surge replica placed since the last call evicts one old replica (loading first)
        and gives its surge back, as the cell does on seeing the replacement bound."""
        nonlocal surge, scale_events
        for move in moves.values():
            for replica in [r for r in move.surge if r.state != PENDING]:
                move.surge.remove(replica)
                if replica.state not in (LOADING, READY):
                    continue  # removed by a scale-down before it was placed
                move.olds = [r for r in move.olds if r.state in (LOADING, READY)]
                if move.olds:
                    old = min(move.olds, key=lambda r: (r.state == READY, r.id))
                    move.olds.remove(old)
                    pool.remove(old)
                if move.surge_left:
                    move.surge_left -= 1
                    surge -= 1
                    scale_events += 1

    for t in range(duration):
        now = float(t)
        # Lifecycle at the start of the second.
        changed = pool.promote_ready(now)
        if t in notice_at:
            idx = notice_at[t]
            interruption = notices[idx]
            victim = pick_victim(pool.nodes, pool.per_node())
            if victim is not None:
                victim.reclaim_at = interruption.deadline
                on_node = pool.on_node(victim)
                entry: dict[str, object] = {
                    "notice_at": now, "notice_s": interruption.notice_s, "node": victim.name,
                    "replicas_on_node": len(on_node), "ready_at_notice": pool.counts[READY], "surge": 0}
                view.now = now
                classes = tuple(policy.on_spot_notice(
                    SpotNoticeView(now, interruption.deadline, victim.name, len(on_node)), view))
                if classes:
                    victim.cordoned = True
                    surge += len(classes)
                    entry["surge"] = len(classes)
                    entry["surge_capacity"] = classes
                    scale_events += 1
                    moves[idx] = _Move(victim, on_node, pool.create(len(classes), classes), len(classes))
                    pool.place_pending(now)
                log[idx] = entry
                deadlines[int(math.ceil(interruption.deadline))] = idx
                changed = True
        advance_moves()
        if t in deadlines:
            idx = deadlines.pop(t)
            entry = log[idx]
            victim = next(n for n in pool.nodes if n.name == entry["node"])
            doomed = pool.on_node(victim)
            lost_ready = sum(1 for r in doomed if r.state == READY)
            lost_requests = 0
            if lost_ready and running and pool.counts[READY]:
                lost_requests = round(len(running) * lost_ready / pool.counts[READY])
                if lost_requests:
                    running.sort()  # a sorted list is a heap; the longest-running are cut
                    for _, tok in running[-lost_requests:]:
                        retries.append((now, tok))
                        waiting_tokens += tok
                    del running[-lost_requests:]
                    retried += lost_requests
            move = moves.pop(idx, None)
            for replica in doomed:
                if move is not None:
                    pool.remove(replica)
                else:
                    pool.make_unreachable(replica, idx)
            if move is not None:
                if move.surge_left:
                    surge -= move.surge_left
                    scale_events += 1
            else:
                deletions[t + int(math.ceil(config.recreate_delay_s))] = idx
            victim.available = False
            victim.cordoned = False
            returns[t + int(math.ceil(config.cluster.spot_return_s))] = victim
            hit = int(entry["replicas_on_node"]) > 0
            entry.update(hit=hit, requests_cut=lost_requests, ready_after_deadline=pool.counts[READY],
                         survived=hit and lost_requests == 0
                         and pool.counts[READY] >= min(int(entry["ready_at_notice"]), base_target))
            changed = True
        if t in deletions:
            idx = deletions.pop(t)
            for replica in [r for r in pool.replicas if r.state == UNREACHABLE and r.interruption == idx]:
                pool.remove(replica)
            changed = True
        if t in returns:
            node = returns.pop(t)
            node.available, node.reclaim_at, node.cordoned = True, None, False
            changed = True
        if changed:
            pool.reconcile(base_target + surge, now)
            advance_moves()

        # Serve the requests of [t, t + 1).
        capacity = pool.counts[READY] * slots
        end = now + 1.0
        clock = now
        busy = 0.0
        while len(running) < capacity and (retries or queue):
            start_oldest(now)
        while True:
            next_arrival = arrivals[ai] if ai < n_requests else math.inf
            next_finish = running[0][0] if running else math.inf
            if next_finish <= next_arrival:
                if next_finish >= end:
                    break
                heapq.heappop(running)
                busy += (len(running) + 1) * (next_finish - clock)
                clock = next_finish
                if len(running) < capacity and (retries or queue):
                    start_oldest(clock)
            else:
                if next_arrival >= end:
                    break
                busy += len(running) * (next_arrival - clock)
                clock = next_arrival
                tok = tokens[ai]
                ai += 1
                if len(running) < capacity and not retries and not queue:
                    histogram[0] += 1
                    served += 1
                    minute_samples += 1
                    heapq.heappush(running, (clock + tok / seq_rate, tok))
                else:
                    queue.append((clock, tok))
                    waiting_tokens += tok
        busy += len(running) * (end - clock)

        # Integrals over the second.
        busy_total += busy
        ready_slot_total += capacity
        waiting_total += len(queue) + len(retries)
        gpu_s_spot += pool.gpus_spot
        gpu_s_od += pool.gpus_on_demand

        if (t + 1) % 60 == 0:
            for waiting in (retries, queue):
                minute_samples += len(waiting)
                for arrived, _ in waiting:
                    if end - arrived <= slo_s:
                        break
                    minute_over += 1
            minute_violations.append(minute_violates(minute_samples, minute_over, config.slo_percentile))
            minute_ready.append(pool.counts[READY])
            minute_samples = minute_over = 0
        if progress is not None and (t + 1) % 3600 == 0:
            progress(end)

        # The policy looks at the pool as the second ends.
        view.now = end
        view.target = base_target
        view.ready = pool.counts[READY]
        view.loading = pool.counts[LOADING]
        view.pending = pool.counts[PENDING]
        view.waiting_requests = len(queue) + len(retries)
        view.waiting_tokens = waiting_tokens
        view.running = len(running)
        view.tokens_processed = busy_total * seq_rate
        view.busy_slot_seconds = busy_total
        view.ready_slot_seconds = ready_slot_total
        view.waiting_request_seconds = waiting_total
        view.spot_replicas = pool.spot_replicas
        view.usd_per_hour = pool.usd_per_hour
        answer = policy.decide(view)
        scale = Scale(answer) if isinstance(answer, int) else answer
        if scale is not None and scale.replicas != base_target:
            target_changes.append((end, base_target, scale.replicas))
            base_target = scale.replicas
            scale_events += 1
            pool.reconcile(base_target + surge, end, scale.capacity)
        elif pool.counts[PENDING]:
            pool.place_pending(end)
        if moves:
            advance_moves()
        peak = max(peak, pool.alive)

    price = config.cluster
    gpu_hours = (gpu_s_spot + gpu_s_od) / 3600.0
    cost = (gpu_s_spot * price.spot_usd_per_gpu_hour + gpu_s_od * price.on_demand_usd_per_gpu_hour) / 3600.0
    hits = [e for e in log.values() if e.get("hit")]
    return RunResult(
        policy=policy.name,
        slo_violation_minutes=sum(minute_violations),
        gpu_hours=gpu_hours,
        cost_usd=cost,
        scale_events=scale_events,
        interruptions_survived=sum(1 for e in hits if e["survived"]),
        interruptions_hit=len(hits),
        requests=n_requests,
        requests_over_slo=over_slo_total,
        requests_retried=retried,
        ttft_p50_s=_percentile_of_histogram(histogram, served, 0.50),
        ttft_p99_s=_percentile_of_histogram(histogram, served, 0.99),
        peak_replicas=peak,
        spot_gpu_hours=gpu_s_spot / 3600.0,
        minute_violations=minute_violations,
        minute_ready=minute_ready,
        target_changes=target_changes,
        interruption_log=[log[i] for i in sorted(log)],
    )
