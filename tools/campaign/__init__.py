"""The fault campaign (``make campaign``): settings and fault timelines drawn from a seed, judged by the
exchange's own ledger.

Three parts with one history between them, as Jepsen keeps them: ``setting`` and ``nemesis`` draw what is
run and what goes wrong from ``random.Random(seed)`` alone, ``system`` runs it (the reference server with
its ledger, a TCP proxy, Valkey, the daemons) and records the history, ``checker`` judges only that
history. ``run`` plays one seed; ``python -m tools.campaign`` plays many.
"""
