"""Reading a response's body in tests, whether plain or streamed (sync or async iterator)."""

from __future__ import annotations

from asgiref.sync import async_to_sync


def body_of(response) -> bytes:
    if not response.streaming:
        return response.content
    content = response.streaming_content
    if hasattr(content, "__aiter__"):

        async def collect() -> bytes:
            return b"".join([chunk async for chunk in content])

        return async_to_sync(collect)()
    return b"".join(content)
