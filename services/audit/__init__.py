"""The audit service and its store: every decision, its inputs, commands and results, in Postgres.

:mod:`.models` are the store's tables and :mod:`.db` connects to it and runs its migrations
(``migrations/``, installed as ``berth.migrations``); :mod:`.store` writes audit records
idempotently, :mod:`.service` is the Kafka loop that feeds it, and :mod:`.replay` and
:mod:`.explain` read it back (``berth audit replay|explain``).
"""
