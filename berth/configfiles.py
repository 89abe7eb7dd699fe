"""Reading a cell's configuration from files: the scheduler configuration (YAML) and the pools
file. The services read them at start-up and hand the cells values (:class:`CellConfig`)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml

from berth.cells import CellConfig
from berth.cells.descheduling import DeschedulerSettings
from berth.cells.pools import PoolPolicy, parse_pools
from berth.core.config import ConfigError, SchedulerConfig, default_document, parse_config
from berth.kube.capacity import SPOT_LABELS, SpotLabel

__all__ = ["load_cell_config", "load_config", "read_descheduler", "read_pools", "read_scheduler_document"]


def load_config(text: str | bytes) -> SchedulerConfig:
    """Parse and validate a scheduler configuration written as YAML (or JSON); a document that
    is not YAML is a :class:`ConfigError` too."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([f"(document): not valid YAML: {exc}"]) from exc
    return parse_config(data)


def read_scheduler_document(path: Path | None) -> dict[str, Any]:
    """The scheduler configuration document at ``path``; the core's built-in profile for None."""
    if path is None:
        return default_document()
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a configuration document (a YAML mapping)")
    return data


def read_pools(path: Path) -> dict[str, PoolPolicy]:
    """The pools file at ``path`` (``{pools: {NAMESPACE/NAME: {...}}}``), validated."""
    return parse_pools(yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {})


def read_descheduler(policy: Path, interval: timedelta, cooldown: timedelta) -> DeschedulerSettings:
    """The DeschedulerPolicy at ``policy`` (one YAML or JSON document) as a cell runs it, every
    ``interval``, leaving a workload evicted once alone for ``cooldown``. A policy Berth cannot
    run is a ValueError naming the file and the field."""
    documents = [d for d in yaml.safe_load_all(Path(policy).read_text(encoding="utf-8")) if d is not None]
    if len(documents) != 1:
        raise ValueError(f"{policy}: expected one DeschedulerPolicy document, found {len(documents)}")
    try:
        return DeschedulerSettings(documents[0], interval=interval, cooldown=cooldown)
    except ValueError as exc:
        raise ValueError(f"{policy}: {exc}") from None


def load_cell_config(
    config: Path | None,
    pools: Path | None = None,
    spot_labels: tuple[SpotLabel, ...] = SPOT_LABELS,
    descheduler: DeschedulerSettings | None = None,
) -> CellConfig:
    """The configuration a decision cell runs with these files, spot labels and descheduling
    (validated now, so that errors show at start-up)."""
    return CellConfig(read_scheduler_document(config), read_pools(pools) if pools else {}, spot_labels, descheduler)
