"""Benchmarks for Berth; each prints its figures (see DESIGN.md section 7)."""
