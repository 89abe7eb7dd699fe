"""GPU defragmentation on the Alibaba v2023 GPU trace with departures (``python -m bench.descheduling``)."""
