"""A production LLM request trace as the benchmark's workload (``--trace CSV``).

The CSV has one row per request with the columns ``TIMESTAMP`` (arrival: ``YYYY-MM-DD
HH:MM:SS[.fraction]``, any number of fraction digits, or plain seconds), ``ContextTokens`` (the
prompt's length) and ``GeneratedTokens`` (the output's length) — the shape of the Azure LLM
inference traces (Patel et al., "Splitwise", ISCA 2024; ``shared/data/azure-llm-2023``). Other
columns are ignored. Rows need not be sorted (they are, stably, by arrival).

``scale`` multiplies the request rate by superposing copies of the trace, as ``scale`` independent
populations of users with the same hour would: ``floor(scale)`` copies, plus one more whose
requests are each kept with probability ``scale - floor(scale)``. The first copy is the trace
itself; every other copy is the trace shifted in time by its own offset drawn uniformly in
``±SHIFT_S`` (wrapped around the trace's span), so the minute-level shape of the hour is kept
while the second-level bursts of the copies are independent (copying each request in place
would make a second with 11 requests one with ``11 × scale``: bursts growing with the square
of the scale, not linearly as independent users give). Requests keep their token counts.
Seeded (numpy PCG64): the same trace, scale and seed give the same workload.

``speed`` compresses the trace's clock: a request at second ``t`` of the trace arrives at ``t /
speed`` (so the rate is ``speed`` times higher too, and an hour lasts ``60 / speed`` minutes),
while model loads, the policies' intervals and the SLO keep real seconds: the same traffic, with
ramps ``speed`` times steeper against them. ``--through-kafka`` paces its gateway at that clock.

Second 0 of the run is the first arrival's minute (floored), so the run's minutes are the trace's
clock minutes; the run lasts until the minute after the last arrival.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from .workload import TrafficShape, Workload

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
SHIPPED_TRACE = (
    Path(__file__).resolve().parents[2].parent
    / "shared"
    / "data"
    / "azure-llm-2023"
    / "AzureLLMInferenceTrace_conv.csv"
)
"""The shipped trace: ``<repo>/../shared/data/azure-llm-2023`` (one hour, 19,366 requests)."""
SHIFT_S = 60.0
"""How far (±) each extra copy of a trace is shifted for ``--scale``: a minute keeps the hour's
minute-level shape and decorrelates the copies' second-level bursts."""


class TraceError(ValueError):
    """The trace cannot be read: the message names the file, and the column or the row (its line
    number in the file, the header being line 1)."""


@dataclass(frozen=True)
class Trace:
    """The requests of a trace, sorted by arrival: seconds since ``start`` (the first arrival's
    minute), prompt and generated tokens."""

    path: str
    start: datetime | None
    """The wall-clock time of second 0 (None: the TIMESTAMP column held plain seconds)."""
    arrivals: np.ndarray
    prompt_tokens: np.ndarray
    generated_tokens: np.ndarray

    @property
    def requests(self) -> int:
        return int(self.arrivals.size)


def _timestamp(text: str) -> tuple[datetime | None, float]:
    """(a datetime, or None for plain seconds; the seconds it stands for)."""
    text = text.strip()
    try:
        return None, float(text)
    except ValueError:
        pass
    main, _, fraction = text.partition(".")
    if fraction and not fraction.isdigit():
        raise ValueError(text)
    when = datetime.fromisoformat(main.replace("T", " ").rstrip("Z"))
    seconds = when.timestamp() + (float("0." + fraction) if fraction else 0.0)
    return when, seconds


def load_trace(path: Path | str, *, start_minute: float = 0.0, minutes: float | None = None) -> Trace:
    """Read the trace; ``start_minute``/``minutes`` keep a slice of it (trace minutes from its first
    arrival's minute). Raises :class:`TraceError` naming the missing column or the bad row."""
    path = Path(path)
    try:
        handle = path.open(newline="")
    except OSError as exc:
        raise TraceError(f"{path}: {exc.strerror or exc}") from exc
    arrivals: list[float] = []
    prompts: list[int] = []
    generated: list[int] = []
    first_wall: datetime | None = None
    with handle:
        reader = csv.DictReader(handle)
        found = [name.strip() for name in reader.fieldnames or ()]
        missing = [c for c in COLUMNS if c not in found]
        if missing:
            raise TraceError(
                f"{path}: missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                f"(the header has: {', '.join(found) or 'nothing'}; expected "
                f"{','.join(COLUMNS)})"
            )
        reader.fieldnames = found
        for row in reader:
            line = reader.line_num
            values = {c: (row.get(c) or "").strip() for c in COLUMNS}
            try:
                wall, seconds = _timestamp(values["TIMESTAMP"])
            except ValueError:
                raise TraceError(
                    f"{path}: line {line}: TIMESTAMP {values['TIMESTAMP']!r} is neither "
                    "'YYYY-MM-DD HH:MM:SS[.fraction]' nor seconds"
                ) from None
            if not math.isfinite(seconds):
                raise TraceError(f"{path}: line {line}: TIMESTAMP {values['TIMESTAMP']!r} is not finite")
            counts = []
            for column in COLUMNS[1:]:
                text = values[column]
                if not text.isdigit():
                    raise TraceError(f"{path}: line {line}: {column} {text!r} is not a non-negative integer")
                counts.append(int(text))
            if first_wall is None and wall is not None:
                first_wall = wall
            arrivals.append(seconds)
            prompts.append(counts[0])
            generated.append(counts[1])
    if not arrivals:
        raise TraceError(f"{path}: no requests (only a header)")
    times = np.asarray(arrivals, dtype=float)
    order = np.argsort(times, kind="stable")
    times = times[order]
    origin = math.floor(times[0] / 60.0) * 60.0
    rel = times - origin
    prompt = np.asarray(prompts, dtype=np.int64)[order]
    gen = np.asarray(generated, dtype=np.int64)[order]
    start = None
    if first_wall is not None:
        # Naive timestamps were read (and are shown) in the same local time; aware ones keep their zone.
        start = datetime.fromtimestamp(origin, tz=first_wall.tzinfo)
    if start_minute or minutes is not None:
        lo = start_minute * 60.0
        hi = math.inf if minutes is None else lo + minutes * 60.0
        keep = (rel >= lo) & (rel < hi)
        if not keep.any():
            raise TraceError(
                f"{path}: no request in minutes [{start_minute:g}, "
                f"{start_minute + (minutes or math.inf):g}) of the trace"
            )
        rel, prompt, gen = rel[keep] - lo, prompt[keep], gen[keep]
    return Trace(str(path), start, rel, prompt, gen)


def scaled_workload(trace: Trace, scale: float = 1.0, seed: int = 42, speed: float = 1.0) -> Workload:
    """The trace's requests at ``scale`` × its rate (see the module docstring) as a
    :class:`~bench.scaling.workload.Workload`: ``tokens`` = prompt + generated tokens (the work a
    gateway reports), with the prompt and generated counts kept for the serving model."""
    if scale <= 0 or speed <= 0:
        raise ValueError("scale and speed must be positive")
    rng = np.random.Generator(np.random.PCG64(seed))
    n = trace.requests
    duration = int(math.floor(float(trace.arrivals[-1]) / 60.0) + 1) * 60
    whole = math.floor(scale)
    parts_t: list[np.ndarray] = []
    parts_i: list[np.ndarray] = []
    for copy in range(math.ceil(scale)):
        offset = 0.0 if copy == 0 else float(rng.uniform(-SHIFT_S, SHIFT_S))
        keep = np.ones(n, dtype=bool) if copy < whole else rng.random(n) < scale - whole
        parts_t.append(np.mod(trace.arrivals[keep] + offset, duration))
        parts_i.append(np.flatnonzero(keep))
    arrivals = np.concatenate(parts_t)
    index = np.concatenate(parts_i)
    order = np.argsort(arrivals, kind="stable")
    arrivals, index = arrivals[order] / speed, index[order]
    duration = max(1, math.ceil(duration / speed / 60.0)) * 60
    prompt, gen = trace.prompt_tokens[index], trace.generated_tokens[index]
    rate = np.bincount(np.minimum(arrivals.astype(np.int64), duration - 1), minlength=duration).astype(float)
    shape = TrafficShape(duration_s=duration, mean_requests_per_s=float(index.size) / duration, spikes=0)
    return Workload(
        shape=shape,
        spikes=(),
        rate=rate,
        arrivals=arrivals,
        tokens=prompt + gen,
        prompt_tokens=prompt,
        generated_tokens=gen,
    )
