"""The inventory service: per-node GPU inventory and the routing of cluster facts to cells.

A faust app (:mod:`.app`) over pure folds (:mod:`.fold`); ``berth inventory run`` (:mod:`.cli`).
"""
