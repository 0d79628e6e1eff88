"""Every default of the daemon in one home: the configuration, the command line and each part read them here.

Times are in seconds (the command line shows some in milliseconds). Each value says why it is what it is.
"""

from __future__ import annotations

__all__ = [
    "BAN_MEMORY", "BAN_PAUSE", "HTTP_TIMEOUT", "MAX_BAN", "LATE_ANSWER_CAP", "LEASE_TTL", "MAX_BODY_BYTES", "MAX_RETRIES", "MAX_RETRY_AFTER", "MAX_STRIKES",
    "METRICS_INTERVAL", "ORDER_LATENCY", "OUTAGE_AFTER", "QUEUE_SIZE", "RATE", "SERVER_MAX_429", "THREADS_PER_KEY", "TTL", "WINDOW",
]

#: Requests per key per window, as the reference exchange enforces (a ring of 20 stamps per key).
RATE = 20
#: A rate-limit slot frees this long after its answer: the server's 1000 ms window, plus 1 ms because it
#: compares whole milliseconds with ``>``.
WINDOW = 1.001
#: A send may follow the previous one on its key this long after it, even unanswered: about the
#: reference server's largest incoming latency (50 ms) and a margin. Widened on an invalid nonce.
ORDER_LATENCY = 0.055
#: Worker threads (requests in flight at most) per key under at-least-once. One at a time waits for the key's
#: next send, the others are in an exchange or parked (costing nothing), so a key far from the exchange keeps as
#: many sends in flight as its round trips need and one near it no more than two or three: six keep a key at
#: its ceiling up to round trips of 300 ms.
THREADS_PER_KEY = 6
#: How long a request taken by a worker may wait for a slot before it goes back to the queue (the exercise's TTL).
TTL = 1.0
#: HTTP timeout of each attempt (the exercise's).
HTTP_TIMEOUT = 1.0
#: The longest an exchange may take to place an order it answered in doubt, or to show a placed one to its status
#: endpoint (``[settle] lag_ms``): a "not found" is trusted only once this has passed since the send ended. No
#: exchange documents a bound (Binance: -1007 "execution status unknown"): ten seconds, unless a profile knows.
SETTLE_LAG_MS = 10_000
#: A request with no answer in time holds its rate-limit slot until the server shows it has read it (a byte of
#: the late answer, or the connection's end), or this long: a server frozen longer (stopped, swapped out) is
#: taken to have lost what it held. Longer than any freeze the chaos runs play (40 s).
LATE_ANSWER_CAP = 120.0
#: Failed attempts a request may retry before it is buried: with the backoff (0.2 s doubling) enough to
#: ride out a server restart of a few seconds.
MAX_RETRIES = 5
#: The longest server-asked pause (Retry-After) a key waits out; a longer ask is cut to it.
MAX_RETRY_AFTER = 600.0
#: Unexplained 429s after which a key is parked for the run: well below the server's block.
MAX_STRIKES = 3
#: Rate-limit rejections after which the reference server blocks a key for good.
SERVER_MAX_429 = 10
#: Main queue bound: about half a second of work at full speed, so a stop leaves little behind.
QUEUE_SIZE = 50
#: Attempts failing this long with no answer from the exchange are an outage: no work taken, probes only.
OUTAGE_AFTER = 5.0
#: A shared key's lease lasts this long unrenewed (renewed every third of it).
LEASE_TTL = 3.0
#: How much of the exchange's answer a result record keeps.
MAX_BODY_BYTES = 4096
#: Seconds between two metrics blocks.
METRICS_INTERVAL = 5.0
#: A host ban (an exchange's 418) that names no length is waited out this long.
BAN_PAUSE = 60.0
#: A ban within this long of the last one's end is a repeat: it lasts at least twice the last.
BAN_MEMORY = 3600.0
#: The longest host ban waited out (3 days, the longest an exchange documents): only an absurd
#: Retry-After is cut; a server's real ban is never sent into early.
MAX_BAN = 3 * 86400.0
