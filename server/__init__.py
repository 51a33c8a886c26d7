"""OpenAI-compatible HTTP serving over the twinserve engine.

Processes (ZMQ PUSH/PULL over IPC files in one private temp dir, msgpack messages from
`messages`)::

    client -HTTP-> API server (FastAPI/uvicorn, `api_server`, `engine_client`; `guards` /
                   `http_front`: status counts, API key, body limit and the lean routes in one
                   layer; `text_guard`; `health`: the engine heartbeat)
      -> tokenizer worker (`tokenizer_worker`: tokenize, chat template, length checks, chunked
         counting of long prompts, `prompt_limit`)
      -> engine worker (`engine_worker`: Engine.add/abort/step; with tp=N it is rank 0 and the
         engine itself starts and drives the other ranks, see engine/tp/)
      -> detokenizer worker (`detokenizer_worker`: incremental text, stop strings)
      -> API server -> SSE / JSON to the client

Start one: ``twinserve-serve model.path=DIR server.port=8000 scheduler=lpm cache=radix``
(`launch.main`, Hydra tree of ``twinserve-run``) or ``launch.start_server(EngineConfig(...))``.
Replay a workload against any OpenAI-compatible server: `bench_client` (``twinserve-run
backend=server backend.url=URL``). HTTP overhead vs the in-process engine:
``twinserve-bench http-overhead --model DIR``. The client checks under hostile input:
``python -m twinserve.server.hostile_check --model DIR``. Limits, health, access control and
metrics: docs/serving.md.
"""
