"""Measurement tooling run by the make targets (bench, chaos, soak, profile): not part of the daemon."""
