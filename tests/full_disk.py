"""A disk that fills: what a test passes as ``os.write`` to see a record refused, torn or kept."""

from __future__ import annotations

import os

__all__ = ["FillingDisk"]


class FillingDisk:
    """``os.write`` for a disk that fills: writes normally until ``room`` bytes are used, then writes
    what still fits (a short write) and fails with ENOSPC; ``free()`` makes room again."""

    def __init__(self, room: int) -> None:
        self.room = room

    def __call__(self, fd: int, data) -> int:
        if self.room <= 0:
            raise OSError(28, "No space left on device")
        written = os.write(fd, bytes(data[:self.room]))
        self.room -= written
        return written

    def free(self) -> None:
        self.room = 1 << 30
