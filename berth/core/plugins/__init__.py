"""Scheduling plugins, one module per plugin (or per closely related family), each with a
``NAME`` constant; :mod:`berth.core.registry` maps names to classes."""
