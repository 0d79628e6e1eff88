"""The operator's control API and console page, served from the daemon's own process."""
