"""GPU placement quality on the Alibaba cluster-trace-gpu-v2023, ATC'23 FGD protocol.

Run ``python -m bench.gpu_trace --help``.  Modules: ``trace`` (CSV loading), ``protocol``
(workload construction and the metric), ``simulator`` (event loop), ``policies`` (reference
policies and Berth's), ``__main__`` (the runner).
"""
