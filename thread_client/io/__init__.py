"""The daemon's edges: the HTTP transport to the exchange, where requests come from and where outcomes go."""
