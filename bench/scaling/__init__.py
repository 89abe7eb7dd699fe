"""``make bench-scaling``: Berth's pool scaling against KEDA-like and Dynamo-like references on a
simulated day of bursty chat traffic with spot interruptions (see README.md)."""
