"""Kubernetes-facing helpers that are not I/O: converting manifests into contract models."""
