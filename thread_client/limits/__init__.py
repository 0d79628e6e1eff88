"""Per-key pacing: the rate limiter that cannot trip the server's limit, nonces, and the keys in use."""
