"""The simulation: one pool, one day, one policy; 1 s control ticks, requests in continuous time.

Serving. A ready replica has ``slots_per_replica`` sequence slots; a request holds one slot for
``tokens / (tokens_per_second_per_replica / slots_per_replica)`` seconds. Requests wait FIFO for a
slot; their time to first token (TTFT) is that wait (the queueing delay; prefill and network add a
constant that no scaling policy changes). A trace's request (prompt and generated tokens known)
holds its slot for ``prompt / prefill_tokens_per_second + generated / decode rate`` (the decode
rate per sequence being ``tokens_per_second_per_replica / slots_per_replica``) and its TTFT is its
wait plus its prefill, ``prompt / prefill_tokens_per_second``. Requests that were running on a replica killed by a spot
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
    keep_ttft_samples: bool = False
    """Keep each minute's TTFT samples for the per-minute percentiles (the pictures)."""


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
    second_target: list[int] = field(default_factory=list)
    """The policy's replica count (its spec, surge included) at the end of each second."""
    second_ready: list[int] = field(default_factory=list)
    """Ready (serving) replicas at the end of each second."""
    minute_ttft: list[tuple[float, float, float]] = field(default_factory=list)
    """p50, p95, p99 TTFT (s) of each minute's samples (with ``RunConfig.keep_ttft_samples``)."""

    def summary(self) -> dict[str, float | int]:
        """The figures of the benchmark's JSON line for this policy."""
        return {
            "slo_violation_minutes": self.slo_violation_minutes,
            "gpu_hours": round(self.gpu_hours, 2),
            "cost_usd": round(self.cost_usd, 2),
            "scale_events": self.scale_events,
            "interruptions_survived": self.interruptions_survived,
        }


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


class _Requests:
    """The request side of a run: arrivals, the FIFO queue (retries ahead of it), the requests
    holding a slot, the TTFT histogram and the current minute's SLO samples.

    A request is ``(arrived, tokens, hold, first)``: its work in tokens, the seconds it holds a
    slot and the seconds from its slot to its first token (its prefill; 0 without a split)."""

    def __init__(self, workload: Workload, pool: PoolConfig) -> None:
        self.slo_s = pool.ttft_slo_ms / 1000.0
        self.seq_rate = pool.tokens_per_second_per_replica / pool.slots_per_replica
        self.arrivals = workload.arrivals.tolist()
        self.tokens = workload.tokens.tolist()
        self.split = workload.prompt_tokens is not None and workload.generated_tokens is not None
        if self.split:
            prefill = workload.prompt_tokens / pool.prefill_tokens_per_second
            self.firsts = prefill.tolist()
            self.holds = (prefill + workload.generated_tokens / self.seq_rate).tolist()
        else:
            self.firsts = [0.0] * len(self.tokens)
            self.holds = [tok / self.seq_rate for tok in self.tokens]
        self.count = len(self.arrivals)
        self.next_index = 0  # the next request to arrive
        self.queue: deque[tuple[float, int, float, float]] = deque()  # (arrived, tokens, hold, first)
        self.retries: deque[tuple[float, int, float, float]] = deque()
        self.waiting_tokens = 0
        self.running: list[tuple[float, int, float, float]] = []  # a heap of (finishes at, tokens, hold, first)
        self.histogram = [0] * (TTFT_BUCKETS + 1)
        self.served = self.over_slo_total = self.retried = 0
        self.busy_total = self.ready_slot_total = self.waiting_total = 0.0
        self.processed_total = 0.0
        """Tokens processed (with a split: each running request at its tokens / hold)."""
        self.rate_sum = 0.0
        self.minute_samples = self.minute_over = 0
        self.minute_ttfts: list[float] = []
        """The current minute's TTFT samples (kept for the percentile-over-time picture)."""
        self.keep_samples = False

    def _count(self, ttft: float) -> None:
        self.histogram[min(int(ttft / TTFT_BUCKET_S), TTFT_BUCKETS)] += 1
        self.served += 1
        self.minute_samples += 1
        if ttft > self.slo_s:
            self.over_slo_total += 1
            self.minute_over += 1
        if self.keep_samples:
            self.minute_ttfts.append(ttft)

    def _run(self, at: float, tok: int, hold: float, first: float) -> None:
        heapq.heappush(self.running, (at + hold, tok, hold, first))
        if self.split:
            self.rate_sum += tok / hold if hold > 0 else 0.0

    @property
    def waiting(self) -> int:
        return len(self.queue) + len(self.retries)

    def start_oldest(self, at: float) -> None:
        """Give a free slot, at time ``at``, to the oldest waiting request (retries first),
        counting its time to first token."""
        arrived, tok, hold, first = self.retries.popleft() if self.retries else self.queue.popleft()
        self.waiting_tokens -= tok
        self._count(at - arrived + first)
        self._run(at, tok, hold, first)

    def cut(self, now: float, lost_ready: int, ready: int) -> int:
        """``lost_ready`` of the ``ready`` replicas die at ``now``: their share of the running
        requests (the longest-running) is cut and retried at once. Returns how many were cut."""
        running = self.running
        if not (lost_ready and running and ready):
            return 0
        lost = round(len(running) * lost_ready / ready)
        if lost:
            running.sort()  # a sorted list is a heap; the longest-running are cut
            for _, tok, hold, first in running[-lost:]:
                self.retries.append((now, tok, hold, first))
                self.waiting_tokens += tok
                if self.split:
                    self.rate_sum -= tok / hold if hold > 0 else 0.0
            del running[-lost:]
            self.retried += lost
        return lost

    def serve_second(self, now: float, capacity: int) -> None:
        """Serve the requests of [now, now + 1) on ``capacity`` slots, in event order (arrivals
        and finishes), and add the second to the busy/ready/waiting integrals."""
        arrivals, tokens, running, queue, retries = self.arrivals, self.tokens, self.running, self.queue, self.retries
        holds, firsts, split = self.holds, self.firsts, self.split
        index = self.next_index
        end = now + 1.0
        clock = now
        busy = 0.0
        while len(running) < capacity and (retries or queue):
            self.start_oldest(now)
        while True:
            next_arrival = arrivals[index] if index < self.count else math.inf
            next_finish = running[0][0] if running else math.inf
            if next_finish <= next_arrival:
                if next_finish >= end:
                    break
                _, tok, hold, _ = heapq.heappop(running)
                busy += (len(running) + 1) * (next_finish - clock)
                if split:
                    self.processed_total += self.rate_sum * (next_finish - clock)
                    self.rate_sum -= tok / hold if hold > 0 else 0.0
                clock = next_finish
                if len(running) < capacity and (retries or queue):
                    self.start_oldest(clock)
            else:
                if next_arrival >= end:
                    break
                busy += len(running) * (next_arrival - clock)
                if split:
                    self.processed_total += self.rate_sum * (next_arrival - clock)
                clock = next_arrival
                tok, hold, first = tokens[index], holds[index], firsts[index]
                index += 1
                if len(running) < capacity and not retries and not queue:
                    self._count(first)
                    self._run(clock, tok, hold, first)
                else:
                    queue.append((clock, tok, hold, first))
                    self.waiting_tokens += tok
        busy += len(running) * (end - clock)
        if split:
            self.processed_total += self.rate_sum * (end - clock)
        self.next_index = index
        self.busy_total += busy
        self.ready_slot_total += capacity
        self.waiting_total += self.waiting

    def close_minute(self, end: float, percentile: float) -> bool:
        """Whether the minute ending at ``end`` violates the SLO; requests still waiting count
        with their wait so far. Starts the next minute's samples."""
        for waiting in (self.retries, self.queue):
            self.minute_samples += len(waiting)
            if self.keep_samples:
                self.minute_ttfts.extend(end - arrived for arrived, *_ in waiting)
            for arrived, *_ in waiting:
                if end - arrived <= self.slo_s:
                    break
                self.minute_over += 1
        violates = minute_violates(self.minute_samples, self.minute_over, percentile)
        self.minute_samples = self.minute_over = 0
        return violates

    def minute_percentiles(self) -> tuple[float, float, float]:
        """p50, p95, p99 (nearest rank) of the minute's samples, then forgets them."""
        samples = sorted(self.minute_ttfts)
        self.minute_ttfts = []
        if not samples:
            return (0.0, 0.0, 0.0)
        return tuple(samples[max(0, math.ceil(q * len(samples)) - 1)] for q in (0.5, 0.95, 0.99))  # type: ignore[return-value]  # three quantiles: a 3-tuple


class _Run:
    """One policy over one workload, a second at a time: the pool's lifecycle (readiness, spot
    notices, deadlines, recreations, nodes coming back), the serving, and the policy's answer."""

    def __init__(
        self,
        workload: Workload,
        policy: ScalingPolicy,
        interruptions: tuple[Interruption, ...],
        config: RunConfig,
        progress: Callable[[float], None] | None,
    ) -> None:
        self.config = config
        self.policy = policy
        self.progress = progress
        self.duration = workload.shape.duration_s
        self.slots = config.pool.slots_per_replica
        self.pool = _Pool(config)
        self.pool.create(config.pool.initial_replicas)
        self.pool.place_pending(-config.pool.model_load_seconds)  # warm start: ready at midnight
        self.pool.promote_ready(0.0)
        self.base_target = config.pool.initial_replicas
        self.surge = 0
        self.view = PoolView()
        self.view.probe = self.pool.probe
        self.requests = _Requests(workload, config.pool)
        self.requests.keep_samples = config.keep_ttft_samples
        self.second_target: list[int] = []
        self.second_ready: list[int] = []
        self.minute_ttft: list[tuple[float, float, float]] = []
        self.gpu_s_spot = self.gpu_s_od = 0.0
        self.minute_violations: list[bool] = []
        self.minute_ready: list[int] = []
        self.target_changes: list[tuple[float, int, int]] = []
        self.scale_events = 0
        self.peak = self.pool.alive
        self.notices = sorted(interruptions, key=lambda i: i.notice_at)
        self.notice_at = {int(i.notice_at): idx for idx, i in enumerate(self.notices)}
        # Second → interruption index (or the node coming back), for what happens at that second.
        self.deadlines: dict[int, int] = {}
        self.deletions: dict[int, int] = {}
        self.returns: dict[int, Node] = {}
        self.log: dict[int, dict[str, object]] = {}
        self.moves: dict[int, _Move] = {}

    def run(self) -> RunResult:
        for t in range(self.duration):
            self.step(t)
        return self.result()

    def step(self, t: int) -> None:
        now = float(t)
        end = now + 1.0
        self.lifecycle(t, now)
        self.requests.serve_second(now, self.pool.counts[READY] * self.slots)
        self.gpu_s_spot += self.pool.gpus_spot
        self.gpu_s_od += self.pool.gpus_on_demand
        if (t + 1) % 60 == 0:
            self.minute_violations.append(self.requests.close_minute(end, self.config.slo_percentile))
            self.minute_ready.append(self.pool.counts[READY])
            if self.config.keep_ttft_samples:
                self.minute_ttft.append(self.requests.minute_percentiles())
        if self.progress is not None and (t + 1) % 3600 == 0:
            self.progress(end)
        self.consult_policy(end)
        if self.moves:
            self.advance_moves()
        self.peak = max(self.peak, self.pool.alive)
        self.second_target.append(self.base_target + self.surge)
        self.second_ready.append(self.pool.counts[READY])

    def lifecycle(self, t: int, now: float) -> None:
        """What happens to the pool at the start of second ``t``; the ReplicaSet reconciles when
        anything changed."""
        changed = self.pool.promote_ready(now)
        if t in self.notice_at and self.on_notice(self.notice_at[t], now):
            changed = True
        self.advance_moves()
        if t in self.deadlines:
            self.on_deadline(self.deadlines.pop(t), t, now)
            changed = True
        if t in self.deletions:
            idx = self.deletions.pop(t)
            for replica in [r for r in self.pool.replicas if r.state == UNREACHABLE and r.interruption == idx]:
                self.pool.remove(replica)
            changed = True
        if t in self.returns:
            node = self.returns.pop(t)
            node.available, node.reclaim_at, node.cordoned = True, None, False
            changed = True
        if changed:
            self.pool.reconcile(self.base_target + self.surge, now)
            self.advance_moves()

    def on_notice(self, idx: int, now: float) -> bool:
        """Spot notice ``idx``: pick the victim node and let the policy answer with surge replicas
        (which start a move off the node). False when no node could be the victim."""
        pool = self.pool
        interruption = self.notices[idx]
        victim = pick_victim(pool.nodes, pool.per_node())
        if victim is None:
            return False
        victim.reclaim_at = interruption.deadline
        on_node = pool.on_node(victim)
        entry: dict[str, object] = {
            "notice_at": now,
            "notice_s": interruption.notice_s,
            "node": victim.name,
            "replicas_on_node": len(on_node),
            "ready_at_notice": pool.counts[READY],
            "surge": 0,
        }
        self.view.now = now
        classes = tuple(
            self.policy.on_spot_notice(SpotNoticeView(now, interruption.deadline, victim.name, len(on_node)), self.view)
        )
        if classes:
            victim.cordoned = True
            self.surge += len(classes)
            entry["surge"] = len(classes)
            entry["surge_capacity"] = classes
            self.scale_events += 1
            self.moves[idx] = _Move(victim, on_node, pool.create(len(classes), classes), len(classes))
            pool.place_pending(now)
        self.log[idx] = entry
        self.deadlines[int(math.ceil(interruption.deadline))] = idx
        return True

    def on_deadline(self, idx: int, t: int, now: float) -> None:
        """Interruption ``idx``'s node goes: its replicas die (removed if the pool surged, else
        unreachable until deleted), their requests are cut, and the node comes back later."""
        pool = self.pool
        entry = self.log[idx]
        victim = next(n for n in pool.nodes if n.name == entry["node"])
        doomed = pool.on_node(victim)
        lost_ready = sum(1 for r in doomed if r.state == READY)
        lost_requests = self.requests.cut(now, lost_ready, pool.counts[READY])
        move = self.moves.pop(idx, None)
        for replica in doomed:
            if move is not None:
                pool.remove(replica)
            else:
                pool.make_unreachable(replica, idx)
        if move is not None:
            if move.surge_left:
                self.surge -= move.surge_left
                self.scale_events += 1
        else:
            self.deletions[t + int(math.ceil(self.config.recreate_delay_s))] = idx
        victim.available = False
        victim.cordoned = False
        self.returns[t + int(math.ceil(self.config.cluster.spot_return_s))] = victim
        hit = int(entry["replicas_on_node"]) > 0
        entry.update(
            hit=hit,
            requests_cut=lost_requests,
            ready_after_deadline=pool.counts[READY],
            survived=hit
            and lost_requests == 0
            and pool.counts[READY] >= min(int(entry["ready_at_notice"]), self.base_target),
        )

    def advance_moves(self) -> None:
        """Each surge replica placed since the last call evicts one old replica (loading first)
        and gives its surge back, as the cell does on seeing the replacement bound."""
        for move in self.moves.values():
            for replica in [r for r in move.surge if r.state != PENDING]:
                move.surge.remove(replica)
                if replica.state not in (LOADING, READY):
                    continue  # removed by a scale-down before it was placed
                move.olds = [r for r in move.olds if r.state in (LOADING, READY)]
                if move.olds:
                    old = min(move.olds, key=lambda r: (r.state == READY, r.id))
                    move.olds.remove(old)
                    self.pool.remove(old)
                if move.surge_left:
                    move.surge_left -= 1
                    self.surge -= 1
                    self.scale_events += 1

    def consult_policy(self, end: float) -> None:
        """The policy looks at the pool as the second ends; a new replica count is reconciled."""
        pool, requests, view = self.pool, self.requests, self.view
        view.now = end
        view.target = self.base_target
        view.ready = pool.counts[READY]
        view.loading = pool.counts[LOADING]
        view.pending = pool.counts[PENDING]
        view.waiting_requests = requests.waiting
        view.waiting_tokens = requests.waiting_tokens
        view.running = len(requests.running)
        view.tokens_processed = requests.processed_total if requests.split else requests.busy_total * requests.seq_rate
        view.busy_slot_seconds = requests.busy_total
        view.ready_slot_seconds = requests.ready_slot_total
        view.waiting_request_seconds = requests.waiting_total
        view.spot_replicas = pool.spot_replicas
        view.usd_per_hour = pool.usd_per_hour
        answer = self.policy.decide(view)
        scale = Scale(answer) if isinstance(answer, int) else answer
        if scale is not None and scale.replicas != self.base_target:
            self.target_changes.append((end, self.base_target, scale.replicas))
            self.base_target = scale.replicas
            self.scale_events += 1
            pool.reconcile(self.base_target + self.surge, end, scale.capacity)
        elif pool.counts[PENDING]:
            pool.place_pending(end)

    def result(self) -> RunResult:
        price = self.config.cluster
        requests = self.requests
        gpu_hours = (self.gpu_s_spot + self.gpu_s_od) / 3600.0
        cost = (
            self.gpu_s_spot * price.spot_usd_per_gpu_hour + self.gpu_s_od * price.on_demand_usd_per_gpu_hour
        ) / 3600.0
        hits = [e for e in self.log.values() if e.get("hit")]
        return RunResult(
            policy=self.policy.name,
            slo_violation_minutes=sum(self.minute_violations),
            gpu_hours=gpu_hours,
            cost_usd=cost,
            scale_events=self.scale_events,
            interruptions_survived=sum(1 for e in hits if e["survived"]),
            interruptions_hit=len(hits),
            requests=requests.count,
            requests_over_slo=requests.over_slo_total,
            requests_retried=requests.retried,
            ttft_p50_s=_percentile_of_histogram(requests.histogram, requests.served, 0.50),
            ttft_p99_s=_percentile_of_histogram(requests.histogram, requests.served, 0.99),
            peak_replicas=self.peak,
            spot_gpu_hours=self.gpu_s_spot / 3600.0,
            minute_violations=self.minute_violations,
            minute_ready=self.minute_ready,
            target_changes=self.target_changes,
            interruption_log=[self.log[i] for i in sorted(self.log)],
            second_target=self.second_target,
            second_ready=self.second_ready,
            minute_ttft=self.minute_ttft,
        )


def simulate(
    workload: Workload,
    policy: ScalingPolicy,
    interruptions: tuple[Interruption, ...],
    config: RunConfig | None = None,
    progress: Callable[[float], None] | None = None,
) -> RunResult:
    """Run ``policy`` over ``workload``; deterministic (no clock, no randomness of its own)."""
    return _Run(workload, policy, interruptions, config or RunConfig(), progress).run()
