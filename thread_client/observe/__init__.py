"""Seeing what the daemon does: metrics primitives below the flow, reports, summary and Prometheus above it."""
