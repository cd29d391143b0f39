"""Metrics: one definition everywhere (spec/hadar.md section 5)."""
