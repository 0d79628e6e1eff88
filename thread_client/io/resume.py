"""Picking a file or pipe of requests up again after a crash: what is done, what was in flight,
and which sends of the earlier run may still have been accepted."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..delivery import AT_LEAST_ONCE, Delivery
from ..request import FinalOutcome, InvalidInput, Params, Request, Work, endpoint_fields, json_text, read_json
from .jsonlines import JsonLinesFile, JsonLinesOutput, json_objects
from .seen_ids import SeenIds

__all__ = ["EarlierSend", "ResumePoint", "SendJournal", "line_digest"]


class SendJournal(JsonLinesOutput):
    """A ``Journal``: ``<results>.sent``, one line (id, key id, nonce, params; the endpoint and weight where
    they are not the profile's) written before each send, so a restart can tell the requests that may
    have reached the exchange from those that never left (and mark them ``resumed_after_crash``), and
    send the last one of each key again with its own nonce, to the same endpoint. A line that cannot be
    written raises OSError (the send must not leave: a restart would send it again unmarked). Exactly-once
    (``delivery``) puts each line on the disk before its send leaves (group-committed), so even a power
    loss cannot hide a send."""

    def __init__(
        self, results_path: str, *, delivery: Delivery = AT_LEAST_ONCE, write: Callable[[int, bytes], int] = os.write,
    ) -> None:
        self.path = f"{results_path}.sent"
        # write: os.write, or a test's full disk
        self._file = JsonLinesFile(self.path, durable=delivery.durable_outputs, relied_on=True, exclusive=True,
                                   write=write, encode=json_text)  # params as the input line wrote them
        # Exactly-once: each line says so, and only such lines are settled by a restart; a send of an
        # at-least-once run may have been overtaken on its key (a 400 that would read as an accept).
        self._mark = {"once": True} if delivery.settles_ambiguous else {}

    def __repr__(self) -> str:
        return f"<SendJournal {self.path}>"

    def sending(self, request: Request, key: str, nonce: int) -> None:
        """Write down that ``request`` leaves now on the key whose id is ``key``, with ``nonce``."""
        self._file.append({"id": request.req_id, "key": key, "nonce": nonce, "params": request.params,
                           **endpoint_fields(request), **self._mark,
                           **({"requeue": request.requeue} if request.requeue else {})})

    def answered(self, request: Request, key: str, nonce: int) -> None:
        """Write down that the send of ``nonce`` was answered without being accepted: a restart must
        not settle it (a 400 to the same nonce would then read as an earlier accept)."""
        self._file.append({"id": request.req_id, "key": key, "nonce": nonce, "answered": True})


@dataclass(frozen=True, slots=True)
class EarlierSend:
    """The last send of an earlier run on one key, with no final record: its fate is unknown until
    the same nonce is sent again on the same key, before anything else (exactly-once)."""

    id: str
    key: str  # the key's id (``key_id``), never its shown name: two keys may show the same
    nonce: int
    params: Params = field(default_factory=dict)
    method: str = ""  # where it went, as its request named it ("": the profile's endpoint)
    path: str = ""
    weight: int = 1
    requeue: int = 0  # the n-th sending again of the id after its dead record (0: its first life)

    @classmethod
    def read(cls, record: dict) -> "EarlierSend | None":
        """The send a journal's ``sending`` record notes; None if the record is not one (a torn or foreign line)."""
        try:
            return cls(str(record["id"]), str(record["key"]), int(record["nonce"]), dict(record.get("params", {})),
                       str(record.get("method", "")), str(record.get("path", "")), int(record.get("weight", 1)),
                       int(record.get("requeue", 0)))
        except (KeyError, TypeError, ValueError):
            return None

    def work(self) -> Work:
        """The request as it was sent, to send again, with the key it went on."""
        return Work(self.id, self.params, method=self.method, path=self.path, weight=self.weight, sent_on=self.key)


class ResumePoint:
    """What an earlier run of the same input left.

    * ``skip``: ids the source passes over: those with a final record, and the ``unsettled`` ones;
    * ``invalid_lines``: the lines recorded ``invalid_input``, each known by where it is (``line 12``)
      and a digest of its bytes (a line that is no request has no id to know it by; another input
      written to the same results file may hold another line there): ``recorded_invalid``;
    * ``resumed``: ids sent without a final record, whose last send was answered before the key's
      next send (so not accepted in exactly-once): sent again, marked ``resumed_after_crash``, each with
      the id of the key its latest send went on (``SeenIds.word_of``): whose account a status ask must ask;
    * ``unsettled``: per key id, the send its last journal line names, if that request has no final
      record, that send is its latest and no answer to it was written down: in exactly-once it may
      have been accepted unanswered, and is settled with its own nonce before the key sends anything
      else (one request in flight per key). A key whose last send was accepted, or answered, has
      nothing to settle, whatever earlier lines it has. A dead letter the operator sent again (its send's
      ``requeue``) is settled too while no record of that requeue ends it: its dead record is no longer final.

    ``unsettled`` is kept only if ``delivery`` settles them (exactly-once); otherwise those requests are
    resumed like the others. ``skip``, ``invalid_lines`` and ``resumed`` live on disk, so memory
    stays flat for any input; ``unsettled`` holds at most one send per key.
    """

    def __init__(
        self, results_path: str, state_dir: str | os.PathLike[str] | None = None, *,
        delivery: Delivery = AT_LEAST_ONCE,
    ) -> None:
        self.skip = SeenIds(state_dir)
        self.invalid_lines = SeenIds(state_dir)
        self.resumed = SeenIds(state_dir)
        requeues_ended: dict[str, int] = {}  # id -> its latest requeue with a final record (requeued ids only)
        # json.loads, not read_json: a record written before answers kept their numbers' text may hold NaN.
        for record in json_objects(Path(results_path)):
            if record.get("requeued") is True:
                request_id = str(record.get("id", ""))
                requeues_ended[request_id] = max(requeues_ended.get(request_id, 0), int(record.get("requeue", 1)))
            if record.get("outcome") == FinalOutcome.INVALID_INPUT.value:
                self.invalid_lines.add(_line_key(str(record.get("where", "")), str(record.get("line_digest", ""))))
            else:
                self.skip.add(str(record.get("id", "")))
        # Per key id, its last send and whether it is beyond doubt (answered, moved on to another key, or
        # written by an at-least-once run); per id, the key whose last send is that id's latest. Both
        # hold at most one entry per key.
        last_on_key: dict[str, tuple[EarlierSend, bool]] = {}
        key_of_last: dict[str, str] = {}
        for record in json_objects(Path(f"{results_path}.sent"), read_json):
            send = EarlierSend.read(record)
            if send is None:
                continue
            if record.get("answered") is True:  # counts only while that send is still its key's last
                last = last_on_key.get(send.key)
                if last is not None and (last[0].id, last[0].nonce) == (send.id, send.nonce):
                    last_on_key[send.key] = (last[0], True)
                continue
            if send.id not in self.skip:
                self.resumed.note(send.id, send.key)  # the key its latest send went on: the one to ask with
            earlier_key = key_of_last.pop(send.id, None)
            if earlier_key is not None and earlier_key != send.key:  # it moved on: its send there was answered
                last_on_key[earlier_key] = (last_on_key[earlier_key][0], True)
            replaced = last_on_key.get(send.key)
            if replaced is not None and key_of_last.get(replaced[0].id) == send.key:
                del key_of_last[replaced[0].id]  # its latest send is no key's last any more
            last_on_key[send.key] = (send, record.get("once") is not True)
            key_of_last[send.id] = send.key
        self.unsettled = {key: send for key, (send, beyond_doubt) in last_on_key.items()
                          if not beyond_doubt and (send.id not in self.skip or send.requeue > requeues_ended.get(send.id, 0))
                          } if delivery.settles_ambiguous else {}
        for send in self.unsettled.values():
            self.skip.add(send.id)

    def recorded_invalid(self, line: InvalidInput) -> bool:
        """Whether an earlier run recorded ``line``, the same bytes at the same place, as ``invalid_input``.
        A record written before lines had digests names its line by ``where`` alone."""
        return any(_line_key(line.where, digest) in self.invalid_lines for digest in (line.digest, ""))

    def close(self) -> None:
        for ids in (self.skip, self.invalid_lines, self.resumed):
            ids.close()


def line_digest(raw: bytes) -> str:
    """A line's bytes in 16 hex digits: what tells it from another input's line at the same place. Its end
    is left out: a last line gains its newline when the file grows, and stays the same line."""
    return hashlib.sha256(raw.rstrip(b"\r\n")).hexdigest()[:16]


def _line_key(where: str, digest: str) -> str:
    return f"{where} {digest}"
