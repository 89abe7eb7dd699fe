"""The token-lag service: per inference pool, the token queue, smoothed rate and expected TTFT.

A faust app (:mod:`.app`) over a pure fold (:mod:`.fold`); ``berth token-lag run`` (:mod:`.cli`).
"""
