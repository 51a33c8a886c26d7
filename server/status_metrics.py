"""`StatusCounter`: an ASGI middleware counting every HTTP response by status code.

It sits outside the routes and the other guards, so 401, 404, 405, 413, validation 400s and
unhandled 500s are counted like the handlers' own answers. The counter lives in the app state's
`ServerMetrics` (built in the app's lifespan), found through ``scope["app"]``.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class StatusCounter:
    """Invariant: each HTTP request that gets a response, or raises before one, counts once."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status: list[int] = []

        async def counted(msg: Message) -> None:
            if msg["type"] == "http.response.start" and not status:
                status.append(int(msg["status"]))
                _count(scope, status[0])
            await send(msg)

        try:
            await self.app(scope, receive, counted)
        except BaseException:
            if not status:
                _count(scope, 500)
            raise


def _count(scope: Scope, status: int) -> None:
    st = getattr(getattr(scope.get("app"), "state", None), "ts", None)
    if st is not None:
        st.metrics.http.labels(status=str(status)).inc()
