"""How a request moves: created by the producer, queued, sent by a worker, retried through the DLQ, accounted for."""
