"""``twinserve-serve server.replica_urls=[...]``: the proxy (`server/url_proxy.py`) in front of
two real tiny twinserve servers: a chat request and a streamed completion pass through,
``prefix_affinity`` keeps each shared prefix on one URL, a killed backend is routed around
(``/health`` degraded), and with every URL down requests get 503 naming them."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import pytest

from conftest import SERVER_ENV, engine_config
from helpers_server import free_port


class _Proxy:
    """``python -m twinserve.server.launch server.replica_urls=[...] router=NAME`` in a child."""

    def __init__(self, urls: list[str], router: str = "round_robin", *extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "twinserve.server.launch",
                                      f"server.replica_urls=[{','.join(urls)}]", f"router={router}",
                                      f"server.port={self.port}", *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx.get(f"{self.url}/health", timeout=2.0)
                return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"proxy did not start: {self.proc.stdout.read().decode()[-3000:]}")
            time.sleep(0.1)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)
        return int(self.proc.returncode)


def _metrics(url: str) -> dict[str, float]:
    out = {}
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line and line[0] != "#":
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_chat_and_streamed_completion_through_the_proxy(two_servers: list[str]) -> None:
    p = _Proxy(two_servers)
    try:
        assert httpx.get(f"{p.url}/health").json()["status"] == "ok"
        model = httpx.get(f"{p.url}/v1/models").json()["data"][0]["id"]
        r = httpx.post(f"{p.url}/v1/chat/completions", timeout=60, json={
            "model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4,
            "temperature": 0, "ignore_eos": True})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 4 and r.json()["choices"][0]["message"]["role"] == "assistant"
        assert r.headers["x-twinserve-upstream"] in two_servers
        chunks = []
        with httpx.stream("POST", f"{p.url}/v1/completions", timeout=60, json={
                "model": model, "prompt": [5, 6, 7, 8], "max_tokens": 5, "temperature": 0,
                "ignore_eos": True, "stream": True}) as s:
            assert s.status_code == 200 and s.headers["content-type"].startswith("text/event-stream")
            for line in s.iter_lines():
                if line.startswith("data:"):
                    chunks.append(line[5:].strip())
        assert chunks[-1] == "[DONE]"
        assert sum(len(json.loads(c)["choices"]) for c in chunks[:-1]) == 5
        m = _metrics(p.url)
        assert sum(m[f'twinserve_proxy_requests_total{{url="{u}"}}'] for u in two_servers) == 2
        assert all(m[f'twinserve_proxy_in_flight{{url="{u}"}}'] == 0 for u in two_servers)
        assert all(m[f'twinserve_proxy_outstanding_tokens{{url="{u}"}}'] == 0 for u in two_servers)
    finally:
        assert p.stop() == 0


def test_prefix_affinity_keeps_each_shared_prefix_on_one_url(two_servers: list[str]) -> None:
    p = _Proxy(two_servers, "prefix_affinity")
    try:
        where: dict[int, set[str]] = {0: set(), 1: set()}
        for i in range(8):
            g = i % 2
            prompt = [100 + 200 * g + j for j in range(64)] + [900 + i] * 8  # 64 shared tokens per group
            r = httpx.post(f"{p.url}/v1/completions", timeout=60, json={
                "prompt": prompt, "max_tokens": 2, "temperature": 0, "ignore_eos": True})
            assert r.status_code == 200, r.text
            where[g].add(r.headers["x-twinserve-upstream"])
        assert [len(v) for v in where.values()] == [1, 1]  # each prefix stayed where it was first sent
    finally:
        assert p.stop() == 0


def test_a_killed_backend_is_routed_around_then_all_down_is_503(two_servers: list[str], tiny_model: str) -> None:
    from twinserve.server.launch import start_server

    victim = start_server(engine_config(tiny_model), request_timeout_s=60.0, env=SERVER_ENV)
    p = _Proxy([two_servers[0], victim.url])
    try:
        body = {"prompt": [1, 2, 3], "max_tokens": 2, "temperature": 0, "ignore_eos": True}
        served = {httpx.post(f"{p.url}/v1/completions", json=body, timeout=60).headers["x-twinserve-upstream"]
                  for _ in range(2)}
        assert served == {two_servers[0], victim.url}  # round robin used both
        victim.stop()
        for _ in range(4):
            r = httpx.post(f"{p.url}/v1/completions", json=body, timeout=60)
            assert r.status_code == 200 and r.headers["x-twinserve-upstream"] == two_servers[0]
        h = httpx.get(f"{p.url}/health")
        assert h.status_code == 200 and h.json()["status"] == "degraded" and list(h.json()["down"]) == [victim.url]
    finally:
        assert p.stop() == 0
    dead = [f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"]
    p = _Proxy(dead, "round_robin", "server.api_key=sekret")
    try:
        assert httpx.post(f"{p.url}/v1/completions", json=body, timeout=60).status_code == 401  # the proxy's key
        r = httpx.post(f"{p.url}/v1/completions", json=body, timeout=60, headers={"Authorization": "Bearer sekret"})
        assert r.status_code == 503
        msg = r.json()["error"]["message"]
        assert msg.startswith("no server left to send the request to") and all(u in msg for u in dead)
        assert httpx.get(f"{p.url}/health").status_code == 503
    finally:
        assert p.stop() == 0


class _Body(httpx.AsyncByteStream):
    """A response body that is still to be read (as a real server's is)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def __aiter__(self):
        yield self.data


def test_a_429_is_retried_once_on_each_other_live_url() -> None:
    import asyncio

    from twinserve.server.url_proxy import UrlProxy

    def backend(status: int):
        def handle(req: httpx.Request) -> httpx.Response:
            calls.append((str(req.url.host), status))
            return httpx.Response(status, headers={"content-type": "application/json"},
                                  stream=_Body(json.dumps({"ok": status == 200}).encode()))
        return handle

    async def go(statuses: list[int]) -> tuple[int, object]:
        proxy = UrlProxy([f"http://u{i}" for i in range(len(statuses))])
        proxy.clients = [httpx.AsyncClient(base_url=u, transport=httpx.MockTransport(backend(s)))
                         for u, s in zip(proxy.urls, statuses)]
        k, got = await proxy.forward("/v1/completions", {"prompt": "hi", "max_tokens": 3}, {})
        if k >= 0:
            async for _ in proxy.relay(k, got):
                pass
            got = got.status_code
        assert all(v.in_flight == 0 and v.tokens == 0 for v in proxy.routing.views)
        await proxy.close()
        return k, got

    calls: list[tuple[str, int]] = []
    assert asyncio.run(go([429, 429, 200])) == (2, 200)
    assert calls[0] == ("u0", 429) and calls[-1] == ("u2", 200) and len(set(calls)) == len(calls)
    calls.clear()
    k, (status, why) = asyncio.run(go([429, 429]))
    assert (k, status, len(calls)) == (-1, 503, 2)  # each URL tried once, then 503 with the last 429
    assert why.startswith("http://u1 answered 429") and "every live URL" in str(why)


def test_a_down_url_is_probed_and_returns_to_rotation(two_servers: list[str], tiny_model: str) -> None:
    from twinserve.server.launch import start_server

    port = free_port()
    late = f"http://127.0.0.1:{port}"  # nothing listens there yet
    p = _Proxy([two_servers[0], late], "round_robin", "server.replica_probe_s=0.2", "server.replica_probe_max_s=0.5")
    body = {"prompt": [1, 2, 3], "max_tokens": 2, "temperature": 0, "ignore_eos": True}
    h = None
    try:
        for _ in range(2):
            r = httpx.post(f"{p.url}/v1/completions", json=body, timeout=60)
            assert r.status_code == 200 and r.headers["x-twinserve-upstream"] == two_servers[0]
        assert httpx.get(f"{p.url}/health").json()["status"] == "degraded"
        h = start_server(engine_config(tiny_model), port=port, request_timeout_s=60.0, env=SERVER_ENV)
        deadline = time.monotonic() + 30
        while httpx.get(f"{p.url}/health").json()["status"] != "ok":
            assert time.monotonic() < deadline, "the restarted URL never came back into rotation"
            time.sleep(0.1)
        served = [httpx.post(f"{p.url}/v1/completions", json=body, timeout=60).headers["x-twinserve-upstream"]
                  for _ in range(4)]
        assert served.count(late) == 2 and served.count(two_servers[0]) == 2  # round robin over both again
        assert _metrics(p.url)[f'twinserve_proxy_url_returns_total{{url="{late}"}}'] == 1
        assert h.stop() == 0
        h = None
        for _ in range(3):  # out of rotation again, and the requests still served
            r = httpx.post(f"{p.url}/v1/completions", json=body, timeout=60)
            assert r.status_code == 200 and r.headers["x-twinserve-upstream"] == two_servers[0]
        assert list(httpx.get(f"{p.url}/health").json()["down"]) == [late]
    finally:
        if h is not None:
            h.stop()
        assert p.stop() == 0
