"""Whether a next run can go on where this one stopped: decided once, from the input and where the records go."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from .cluster.address import is_store_url

__all__ = ["NOT_RESUMABLE", "Resumability"]


@dataclass(frozen=True)
class Resumability:
    """What a next run of the same command can take up, passed whole to the parts that act on it.

    A next run needs two things: the input again, and a record of what is done. A file can be read
    again (named, or given as standard input: ``- < FILE``) and a work stream keeps its entries pending
    until their records are written; a pipe (``-``, ``/dev/stdin``, a FIFO) and the synthetic load cannot
    be read again. A results file tells a next run what is done; records on standard output do not.

    The rule: work taken in but not sent is left for the next run (no final record) only when the input
    can be read again *and* what is done is recorded where that run reads it (a results file, or the
    work stream itself). Otherwise a stop records it (``shutdown``, or the stop's reason): a pipe's lines
    are gone once read, and a rerun of a file whose records went to standard output would send every
    line again, so the records must say which lines were not sent.

    The results file is read back (what has a record is skipped, journaled sends are settled first) for
    the user's own requests, from a file or a pipe: the same lines piped again are not sent twice.
    """

    #: The input can be read again by a next run: a regular file, or a work stream.
    input_again: bool
    #: The results file a next run resumes from: the user's own requests (a file or a pipe) written to a file;
    #: None for records on standard output, in a results stream, or not kept (the synthetic load).
    results_file: str | None = None
    #: The input is a work stream: its pending entries are what a next run takes up.
    from_stream: bool = False

    @classmethod
    def of(cls, source: str, results: str | None) -> "Resumability":
        """The rule applied to ``--source`` and ``--results`` (``-``: standard output)."""
        if is_store_url(source):
            return cls(input_again=True, from_stream=True)
        if source == "generate":
            return NOT_RESUMABLE
        results_file = None if results in (None, "-") else results
        return cls(input_again=_regular_file(source), results_file=results_file)

    @property
    def keeps_unsent(self) -> bool:
        """Whether a stop leaves the work taken in but not sent to the next run instead of recording it."""
        return self.from_stream or (self.input_again and self.results_file is not None)


def _regular_file(source: str) -> bool:
    """Whether ``source`` (``-``: standard input) is a file a next run can read again from its start,
    not a pipe, a FIFO or a device."""
    try:
        return stat.S_ISREG(os.fstat(0).st_mode if source == "-" else os.stat(source).st_mode)
    except OSError:
        return False


#: Nothing is taken up by a next run: the synthetic load, or a daemon built without a resumable input.
NOT_RESUMABLE = Resumability(input_again=False)
