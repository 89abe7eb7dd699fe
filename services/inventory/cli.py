"""``berth inventory run``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

app = typer.Typer(help="Keep the per-node GPU inventory and route cluster facts to their cells.",
                  no_args_is_help=True)


@app.command("run")
def run(
    kafka: Annotated[Optional[str], typer.Option("--kafka", envvar="BERTH_KAFKA_BOOTSTRAP",
                                                 help="Kafka bootstrap servers, host:port[,host:port].")] = None,
    metrics_port: Annotated[Optional[int], typer.Option(help="Serve Prometheus /metrics on this port.")] = None,
    data_dir: Annotated[Optional[Path], typer.Option(
        help="Directory of faust's local table store (default: $XDG_STATE_HOME/berth/inventory).")] = None,
    store: Annotated[str, typer.Option(
        help="faust table store: memory:// rebuilds the tables from their changelogs at every start; "
             "rocksdict:// keeps them in --data-dir (needs the rocksdict package).")] = "memory://",
) -> None:
    """Consume pods, nodes, policies, GPU telemetry and spot notices; publish node inventories
    (berth.inventory.state.v1) and each cell's inputs (berth.scheduler.inputs.v1). Stops on SIGTERM."""
    from berth.bus import ensure_topics
    from berth.bus.streams import default_data_dir, faust_app_options, new_event_loop, partition_counts, run_worker
    from berth.logs import configure_logging, get_logger
    from berth.schemas.topics import DECISION_INPUTS, NODES, PODS
    from berth.settings import load_settings

    from .app import Layout, create_app

    settings = load_settings(kafka=kafka)
    configure_logging(settings.log_level, settings.log_format, service="inventory")
    log = get_logger(__name__)
    directory = data_dir or default_data_dir("inventory")
    directory.mkdir(parents=True, exist_ok=True)

    async def read_layout() -> Layout:
        await ensure_topics(settings.kafka)
        counts = await partition_counts(settings.kafka, [DECISION_INPUTS.name, PODS.name, NODES.name])
        return Layout(cells=counts[DECISION_INPUTS.name], pod_partitions=counts[PODS.name],
                      node_partitions=counts[NODES.name])

    loop = new_event_loop()
    layout = loop.run_until_complete(read_layout())
    log.info("starting", kafka=settings.kafka.bootstrap, cells=layout.cells,
             pod_partitions=layout.pod_partitions, node_partitions=layout.node_partitions,
             store=store, data_dir=str(directory))
    options = {**faust_app_options(settings.kafka), "store": store, "datadir": str(directory)}
    service = create_app(layout, app_options=options)
    run_worker(service.app, loop=loop, log_level=settings.log_level,
               metrics_port=metrics_port if metrics_port is not None else settings.metrics_port)
    log.info("stopped")
