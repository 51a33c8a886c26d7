"""`ClientWatch` ends a request's waits when its client leaves; `EventStream` writes under it
with Starlette's event-stream headers."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

import pytest
from starlette.responses import StreamingResponse

from twinserve.server.client_watch import ClientWatch
from twinserve.server.sse import SSE_HEADERS, EventStream


def test_sse_headers_are_those_of_a_starlette_event_stream() -> None:
    async def nothing() -> AsyncIterator[bytes]:
        yield b""

    ref = StreamingResponse(nothing(), media_type="text/event-stream",
                            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    assert list(SSE_HEADERS) == ref.raw_headers and EventStream.status_code == ref.status_code


def _receive(disconnect_after: float | None) -> Any:
    async def receive() -> dict[str, Any]:
        await asyncio.sleep(3600 if disconnect_after is None else disconnect_after)
        return {"type": "http.disconnect"}

    return receive


def test_a_client_watch_returns_the_work_or_that_the_client_left() -> None:
    async def main() -> None:
        watch = ClientWatch(_receive(0.05))
        assert await watch.run(asyncio.sleep(0, "done")) == (False, "done")
        cancelled: list[int] = []

        async def forever() -> None:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.append(1)
                raise

        assert await watch.run(forever()) == (True, None) and cancelled == [1] and watch.gone
        # once gone, later work is not started
        started: list[int] = []

        async def later() -> None:
            started.append(1)

        assert await watch.run(later()) == (True, None) and started == []
        assert asyncio.current_task().cancelling() == 0  # the watcher's cancellation was absorbed
        watch.close()

    asyncio.run(asyncio.wait_for(main(), 10))


def test_a_client_watch_lets_other_cancellations_through() -> None:
    async def main() -> None:
        watch = ClientWatch(_receive(None))
        waiter = asyncio.ensure_future(watch.run(asyncio.sleep(3600)))
        await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert not watch.gone
        watch.close()
        with pytest.raises(asyncio.CancelledError):
            await watch._task

    asyncio.run(asyncio.wait_for(main(), 10))


def test_an_event_stream_closes_the_watch_it_was_given() -> None:
    async def main() -> None:
        closed: list[int] = []
        sent: list[dict[str, Any]] = []

        async def events() -> AsyncIterator[bytes]:
            yield b"data: 1\n\n"
            await asyncio.sleep(3600)
            yield b"never"

        async def on_close() -> None:
            closed.append(1)

        async def send(msg: dict[str, Any]) -> None:
            sent.append(msg)

        watch = ClientWatch(_receive(0.05))
        await EventStream(events(), on_close, watch)({"type": "http"}, _receive(None), send)
        await asyncio.sleep(0)
        assert watch.gone and watch._task.done() and closed == [1]
        assert sent[0]["headers"] == list(SSE_HEADERS) and [m.get("body") for m in sent[1:]] == [b"data: 1\n\n"]

    asyncio.run(asyncio.wait_for(main(), 10))
