"""bench.k8s's CPU split: which process is which, and the per-pod arithmetic."""

from __future__ import annotations

import os

from bench.k8s.cpu import component_of, cpu_by_component, ms_per_pod


def test_components_are_named_from_their_command_lines():
    assert component_of(["/x/.venv/bin/python3.11", "/x/.venv/bin/berth", "binder", "run", "--qps", "5"]) == "binder"
    assert component_of(["/x/.venv/bin/python3.11", "/x/.venv/bin/berth", "token-lag", "run"]) == "token-lag"
    assert component_of(["/x/.cache/kubernetes-v1.34.10/bin/kube-apiserver", "--etcd-servers=x"]) == "kube-apiserver"
    assert component_of(["/x/.cache/etcd-v3.6.16/bin/etcd", "--name=berth"]) == "etcd"
    assert component_of(["/usr/bin/java", "-Xmx768m", "-cp", "/x/kafka-3.9.1/libs/*", "kafka.Kafka"]) == "kafka"
    assert component_of(["postgres: berth berth 127.0.0.1(4242) idle", ""]) == "postgres"
    assert component_of(["/usr/lib/postgresql/15/bin/postgres", "-D", "/tmp/pg"]) == "postgres"
    assert component_of(["/usr/bin/java", "-jar", "other.jar"]) is None
    assert component_of(["/x/.venv/bin/berth", "simulate", "pods.yaml"]) is None
    assert component_of([]) is None


def test_ms_per_pod_is_the_difference_of_two_readings_largest_first():
    before = {"bench": 10.0, "kafka": 5.0}
    after = {"bench": 10.5, "kafka": 7.0, "decision": 1.0}
    assert ms_per_pod(before, after, 1000) == {"kafka": 2.0, "decision": 1.0, "bench": 0.5}
    assert ms_per_pod(before, after, 0) == {}


def test_this_process_is_read_as_the_bench():
    # Children a session fixture started (a broker, a database) may be read too, under their names.
    reading = cpu_by_component(os.getpid())
    assert reading["bench"] > 0
    assert set(reading) <= {
        "bench",
        "kafka",
        "postgres",
        "kube-apiserver",
        "etcd",
        "kube-scheduler",
        "ingest",
        "inventory",
        "token-lag",
        "decision",
        "binder",
        "audit",
    }
