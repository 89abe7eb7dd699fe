"""Berth against kube-scheduler on a real kube-apiserver: ``python -m bench.k8s`` (``make bench-k8s``).

See ``__main__`` for what is measured and how, ``workload`` for the pods, README.md for the figures.
"""
