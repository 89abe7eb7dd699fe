"""Shared fixtures: where tests find Kafka and Postgres (DESIGN.md §6).

``kafka_bootstrap`` and ``database_url`` try, in order:

(a) an endpoint from the environment (``BERTH_KAFKA_BOOTSTRAP`` / ``BERTH_DATABASE_URL``), e.g.
    from ``export $(berth dev up)`` — fastest for repeated local runs;
(b) a process the project starts itself (:mod:`berth_dev.devstack`), killed with this session;
(c) a testcontainers container, when a Docker engine answers;
(d) nothing: with ``CI=true`` the requesting tests fail (CI must never skip silently), otherwise
    they are skipped. Either way the message lists why each option did not work.

Services start only when a test requests the fixture, once per session.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import NoReturn

import pytest
from berth_dev.devstack.cache import kafka_jars_present

KAFKA_ENV = "BERTH_KAFKA_BOOTSTRAP"
DATABASE_ENV = "BERTH_DATABASE_URL"
KAFKA_IMAGE = "confluentinc/cp-kafka:7.9.1"  # Confluent Platform 7.9 ships Apache Kafka 3.9
POSTGRES_IMAGE = "postgres:15"

#: (endpoint, stop) from a provider; stop runs at the end of the session.
Provided = tuple[str, Callable[[], None]]


def pytest_configure(config: pytest.Config) -> None:
    # SIGTERM's default action ends the interpreter without running finalizers or atexit, and
    # the parent-death signal would then SIGKILL our services and leave their directories
    # behind. As KeyboardInterrupt it goes through pytest's normal teardown instead.
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _sigterm_as_interrupt)


def _sigterm_as_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt("pytest received SIGTERM")


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def fail_or_skip(message: str) -> NoReturn:
    """A prerequisite is missing: fail with ``message`` under ``CI=true`` (CI must never skip
    silently), skip elsewhere."""
    if _in_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture
def local_binaries() -> None:
    """Tests of our own launchers (``dev up`` starts Kafka and Postgres): java and Postgres installed."""
    from berth_dev.devstack.kafka import find_java
    from berth_dev.devstack.postgres import find_pg_bin
    from berth_dev.devstack.procs import DevStackError

    try:
        find_java()
        find_pg_bin()
    except DevStackError as exc:
        fail_or_skip(str(exc))


@pytest.fixture
def cached_kube_binaries() -> None:
    """Tests that start a control plane of their own: etcd and kube-apiserver already built (the
    ``kube_apiserver`` fixture is the one place that builds on demand)."""
    from berth_dev.devstack.gobuild import kubernetes_binaries_present

    if not kubernetes_binaries_present():
        fail_or_skip("kube-apiserver/etcd not built yet: run `python -m berth_dev.devstack build-kubernetes`")


def _docker_problem() -> str | None:
    """None if a Docker engine answers a ping within a few seconds, else why not."""
    try:
        import docker

        client = docker.from_env(timeout=3)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:
        return f"no Docker engine answered ({type(exc).__name__}: {exc})"
    return None


@contextlib.contextmanager
def _uncaptured(request: pytest.FixtureRequest) -> Iterator[None]:
    """Let output through pytest's capture (progress of a long first-run download)."""
    capture = request.config.pluginmanager.getplugin("capturemanager")
    if capture is None:
        yield
        return
    with capture.global_and_fixture_disabled():
        yield


def _provide(
    request: pytest.FixtureRequest,
    *,
    service: str,
    env_var: str,
    own_process: Callable[[], Provided],
    container: Callable[[], Provided],
) -> str:
    """Walk the (a)-(d) chain from the module docstring for one service."""
    from_env = os.environ.get(env_var, "").strip()
    if from_env:
        return from_env

    reasons = []
    try:
        endpoint, stop = own_process()
        request.addfinalizer(stop)
        return endpoint
    except Exception as exc:
        reasons.append(f"own process: {exc}")

    docker_problem = _docker_problem()
    if docker_problem is None:
        try:
            endpoint, stop = container()
            request.addfinalizer(stop)
            return endpoint
        except Exception as exc:
            reasons.append(f"testcontainers: {type(exc).__name__}: {exc}")
    else:
        reasons.append(f"testcontainers: {docker_problem}")

    message = (
        f"No {service} available for integration tests.\n"
        + "\n".join(f"- {reason}" for reason in reasons)
        + f"\nFix one of them, or set {env_var} to a running {service} "
        "(`export $(python -m berth_dev.devstack up)` starts one in the background)."
    )
    fail_or_skip(message)


@pytest.fixture(scope="session")
def kafka_bootstrap(request: pytest.FixtureRequest) -> str:
    """``host:port`` of a Kafka 3.9 broker for this test session (see the module docstring)."""

    def own_process() -> Provided:
        from berth_dev.devstack.cache import ensure_kafka_jars
        from berth_dev.devstack.kafka import KafkaProcess

        if not kafka_jars_present():
            with _uncaptured(request):
                ensure_kafka_jars()
        kafka = KafkaProcess().start()
        return kafka.bootstrap_servers, kafka.stop

    def container() -> Provided:
        from testcontainers.community.kafka import KafkaContainer

        kafka = KafkaContainer(KAFKA_IMAGE).with_kraft().start()
        return kafka.get_bootstrap_server(), kafka.stop

    return _provide(request, service="Kafka", env_var=KAFKA_ENV, own_process=own_process, container=container)


@pytest.fixture(scope="session")
def database_url(request: pytest.FixtureRequest) -> str:
    """SQLAlchemy URL (``postgresql+psycopg://...``) of a Postgres 15 database for this session."""

    def own_process() -> Provided:
        from berth_dev.devstack.postgres import PostgresProcess

        postgres = PostgresProcess().start()
        return postgres.url, postgres.stop

    def container() -> Provided:
        from testcontainers.community.postgres import PostgresContainer

        postgres = PostgresContainer(
            POSTGRES_IMAGE, username="berth", password="berth", dbname="berth", driver="psycopg"
        ).start()
        return postgres.get_connection_url(), postgres.stop

    return _provide(request, service="Postgres", env_var=DATABASE_ENV, own_process=own_process, container=container)


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name no other test uses: ``test.<test name>.<random hex>`` (Kafka-legal chars)."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name)[:100].strip("-.")
    return f"test.{readable}.{uuid.uuid4().hex[:12]}"


# --- private brokers and databases, for tests whose topic or table names are fixed ------------------


@pytest.fixture
def own_kafka(kafka_bootstrap: str) -> Iterator[str]:
    """An empty broker for this test alone (``kafka_bootstrap`` proves the jars are there)."""
    from berth_dev.devstack.scratch import empty_kafka

    with empty_kafka() as bootstrap:
        yield bootstrap


@pytest.fixture
def fresh_database(database_url: str) -> Iterator[str]:
    """A new, empty database on the session's Postgres server for this test; dropped afterwards."""
    from berth_dev.devstack.scratch import scratch_database

    with scratch_database(database_url, "test") as url:
        yield url


# --- Kubernetes (DESIGN.md §6): BERTH_KUBECONFIG -> our own etcd + kube-apiserver -> fail/skip ---

KUBECONFIG_ENV = "BERTH_KUBECONFIG"


@pytest.fixture(scope="session")
def kube_apiserver(request: pytest.FixtureRequest):  # -> berth_dev.devstack.kube.KubeConnection
    """A kube-apiserver 1.34 for this session, as a ``KubeConnection`` (kubeconfig path, server,
    token, ``api_client()``; ``control_plane`` is set only when the session started it itself).

    Order: ``BERTH_KUBECONFIG`` (an existing cluster, e.g. from ``berth dev up --with-kubernetes``)
    -> our own etcd + kube-apiserver from :mod:`berth_dev.devstack.kube`, building the binaries first
    if needed (~10 minutes the first time on a 2-core machine; the progress is shown) -> with
    ``CI=true`` a failure saying what to do, otherwise a skip. There is no container option.
    """
    from berth_dev.devstack.kube import KubeConnection

    from_env = os.environ.get(KUBECONFIG_ENV, "").strip()
    if from_env:
        return KubeConnection.from_kubeconfig(from_env)

    try:
        from berth_dev.devstack.gobuild import COLD_BUILD_NOTE, ensure_kubernetes_binaries, kubernetes_binaries_present
        from berth_dev.devstack.kube import KubeControlPlane

        if not kubernetes_binaries_present():
            with _uncaptured(request):
                print(
                    f"\nkube_apiserver: building kube-apiserver, kube-scheduler and etcd. {COLD_BUILD_NOTE}", flush=True
                )
                ensure_kubernetes_binaries()
        plane = KubeControlPlane().start()
    except Exception as exc:
        message = (
            f"No kube-apiserver available for integration tests.\n- own process: {exc}\n"
            f"Fix that (`python -m berth_dev.devstack build-kubernetes` builds the binaries), or set {KUBECONFIG_ENV} "
            "to the kubeconfig of a running cluster (`export $(python -m berth_dev.devstack up --with-kubernetes)`)."
        )
        fail_or_skip(message)
    request.addfinalizer(plane.stop)
    return plane.connection()
