"""Streamed downloads (training export, dataset and audit CSV): lines read in batches on the
database thread."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from asgiref.sync import sync_to_async

# Lines handed to the server per hop to the database thread.
LINES_PER_BATCH = 500


async def batched(lines: Iterator[str]) -> AsyncIterator[str]:
    """The lines in batches, each read on the database thread: under ASGI a plain iterator
    would be read to its end into memory before the first byte is sent."""

    def next_batch() -> str:
        batch = []
        for line in lines:
            batch.append(line)
            if len(batch) >= LINES_PER_BATCH:
                break
        return "".join(batch)

    while True:
        text = await sync_to_async(next_batch)()
        if not text:
            return
        yield text
