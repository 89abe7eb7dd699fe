"""One day of bursty chat traffic, generated from a seed (pure: same arguments → same arrays).

The request rate is a diurnal base (a cosine, highest at ``peak_hour``, lowest twelve hours later,
``peak_to_trough`` apart) multiplied during spikes by a factor drawn in ``[spike_min, spike_max]``:
a spike rises linearly over ``spike_rise_s``, holds for a duration drawn in
``[spike_hold_min_s, spike_hold_max_s]`` and decays linearly over ``spike_decay_s``; spikes never
overlap. Arrivals are a non-homogeneous Poisson process at that rate (per-second counts, times
uniform inside the second). Each request carries the tokens a replica must process for it
(prompt and output together): log-normal with median ``tokens_median``, clipped to
``[tokens_min, tokens_max]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TrafficShape:
    """The knobs of :func:`generate`; the defaults are the benchmark's day."""

    duration_s: int = 86_400
    mean_requests_per_s: float = 5.0
    peak_hour: float = 14.0
    peak_to_trough: float = 4.0
    spikes: int = 8
    spike_min: float = 5.0
    spike_max: float = 10.0
    spike_rise_s: float = 60.0
    spike_hold_min_s: float = 300.0
    spike_hold_max_s: float = 1200.0
    spike_decay_s: float = 120.0
    tokens_median: float = 400.0
    tokens_sigma: float = 0.9
    tokens_min: int = 16
    tokens_max: int = 8192


@dataclass(frozen=True)
class Spike:
    start_s: float
    factor: float
    hold_s: float

    def end_s(self, shape: TrafficShape) -> float:
        return self.start_s + shape.spike_rise_s + self.hold_s + shape.spike_decay_s


@dataclass(frozen=True)
class Workload:
    """Requests sorted by arrival: ``arrivals[i]`` seconds after midnight, ``tokens[i]`` tokens."""

    shape: TrafficShape
    spikes: tuple[Spike, ...]
    rate: np.ndarray
    """Expected requests/s for each second of the day."""
    arrivals: np.ndarray
    tokens: np.ndarray
    """The work a gateway reports for each request (tokens of prompt and output together)."""
    prompt_tokens: np.ndarray | None = None
    generated_tokens: np.ndarray | None = None
    """A trace's split of ``tokens`` (None for the generated day: a request is ``tokens`` of work
    at the decode rate, no prefill). With them, the serving model prefills the prompt, then
    decodes the output (see :mod:`bench.scaling.sim`)."""

    @property
    def requests(self) -> int:
        return int(self.arrivals.size)


def diurnal_rate(seconds: np.ndarray, shape: TrafficShape) -> np.ndarray:
    """Base requests/s at each second: mean × (1 + a·cos), a chosen so peak/trough = peak_to_trough."""
    amplitude = (shape.peak_to_trough - 1.0) / (shape.peak_to_trough + 1.0)
    phase = 2.0 * np.pi * (seconds / 86_400.0 - shape.peak_hour / 24.0)
    return shape.mean_requests_per_s * (1.0 + amplitude * np.cos(phase))


def spike_multiplier(seconds: np.ndarray, spikes: tuple[Spike, ...], shape: TrafficShape) -> np.ndarray:
    """The factor applied to the base rate at each second (1 outside spikes)."""
    factor = np.ones_like(seconds, dtype=float)
    for spike in spikes:
        rel = seconds - spike.start_s
        top = spike.factor - 1.0
        rising = (rel >= 0) & (rel < shape.spike_rise_s)
        factor[rising] = 1.0 + top * rel[rising] / shape.spike_rise_s
        hold_end = shape.spike_rise_s + spike.hold_s
        holding = (rel >= shape.spike_rise_s) & (rel < hold_end)
        factor[holding] = spike.factor
        decaying = (rel >= hold_end) & (rel < hold_end + shape.spike_decay_s)
        factor[decaying] = 1.0 + top * (1.0 - (rel[decaying] - hold_end) / shape.spike_decay_s)
    return factor


def draw_spikes(rng: np.random.Generator, shape: TrafficShape) -> tuple[Spike, ...]:
    """``shape.spikes`` non-overlapping spikes (rejection sampling, then sorted by start)."""
    longest = shape.spike_rise_s + shape.spike_hold_max_s + shape.spike_decay_s
    latest_start = shape.duration_s - longest
    if shape.spikes == 0 or latest_start <= 0:
        return ()
    chosen: list[Spike] = []
    for _ in range(shape.spikes * 200):
        if len(chosen) == shape.spikes:
            break
        start = float(rng.uniform(0.0, latest_start))
        if all(abs(start - other.start_s) > longest for other in chosen):
            factor = round(float(rng.uniform(shape.spike_min, shape.spike_max)), 2)
            hold = round(float(rng.uniform(shape.spike_hold_min_s, shape.spike_hold_max_s)))
            chosen.append(Spike(start_s=round(start), factor=factor, hold_s=hold))
    return tuple(sorted(chosen, key=lambda s: s.start_s))


def generate(seed: int, shape: TrafficShape | None = None, spikes: tuple[Spike, ...] | None = None) -> Workload:
    """The day's requests for ``seed``; numpy's PCG64, so the same seed gives the same bytes.
    ``spikes`` replaces the drawn spikes (tests place one where they want it)."""
    shape = shape or TrafficShape()
    rng = np.random.Generator(np.random.PCG64(seed))
    drawn = draw_spikes(rng, shape)
    spikes = drawn if spikes is None else spikes
    seconds = np.arange(shape.duration_s, dtype=float)
    rate = diurnal_rate(seconds, shape) * spike_multiplier(seconds, spikes, shape)
    counts = rng.poisson(rate)
    starts = np.repeat(seconds, counts)
    arrivals = starts + rng.random(starts.size)
    arrivals.sort(kind="stable")
    raw = rng.lognormal(mean=np.log(shape.tokens_median), sigma=shape.tokens_sigma, size=arrivals.size)
    tokens = np.clip(np.rint(raw), shape.tokens_min, shape.tokens_max).astype(np.int64)
    return Workload(shape=shape, spikes=spikes, rate=rate, arrivals=arrivals, tokens=tokens)
