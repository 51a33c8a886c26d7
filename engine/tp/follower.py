"""A follower rank: ``python -m twinserve.engine.tp.follower SPEC_PATH RANK``.

Builds the same `RankExecutor` as rank 0 (its own shard and KV heads), then executes every step
rank 0 sends, in order, until told to stop. It holds no scheduler: a step's `StepInputs` says
everything (token ids or placeholders, positions, KV slots, page tables, sampling parameters,
graph size). Sampled tokens stay on the device, where the next step's placeholders read them;
every rank samples the same tokens from the same all-gathered logits with identically seeded
samplers.

Failure contract: any exception is written to ``rank{r}.err`` in the group's folder and ends the
process with code 1 (rank 0 reports it); the process also ends when rank 0 disappears.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

from twinserve.core.capture_schedule import CaptureItem, CaptureRecord, report_of
from twinserve.core.proc import pid_exists
from twinserve.engine.capture_log import CaptureLog
from twinserve.engine.executor import RankExecutor, resolve_device
from twinserve.engine.tp.channel import StepReceiver
from twinserve.engine.tp.comm import check_group, group_over, make_backend
from twinserve.engine.tp.faults import FaultHook
from twinserve.engine.tp.progress import Progress
from twinserve.engine.tp.spec import GroupSpec


def _alive(pid: int) -> bool:
    """Rank 0 (``pid``) still runs and is still this process's parent."""
    return pid_exists(pid) and os.getppid() == pid


def _watch_leader(pid: int, period_s: float = 0.5) -> None:
    """Exit when rank 0 is gone, even if the main thread is stuck in a collective."""
    while True:
        time.sleep(period_s)
        if not _alive(pid):
            os._exit(1)


def serve(spec: GroupSpec, rank: int, hook: FaultHook) -> None:
    """Join the group, build this rank's executor (its capture schedule checked by rank 0 before
    capture, what it captured reported after), execute steps until "stop"."""
    cfg = spec.engine_cfg
    torch.set_num_threads(spec.num_threads)
    device = resolve_device(cfg.device, rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    receiver = StepReceiver(spec.workdir, rank)
    progress = Progress(spec.workdir, rank)
    store = dist.TCPStore("127.0.0.1", spec.store_port, spec.world_size, False,
                          timeout=timedelta(seconds=spec.start_timeout_s))
    store.set(f"hello/{rank}", str(os.getpid()))
    backend = make_backend(store, rank, spec.world_size, device, spec.timeout_s)
    group = group_over(backend, rank, spec.world_size, progress)
    check_group(group, device)

    def agree_pages(local: int) -> int:
        store.set(f"pages/{rank}", str(local))
        return int(store.get("pages"))  # rank 0 publishes the minimum

    def make_log(schedule: list[CaptureItem]) -> CaptureLog:
        return CaptureLog(hook.schedule(rank, schedule), progress.collectives, progress.capture)

    def agree_schedule(schedule: list[CaptureItem]) -> None:
        store.set(f"schedule/{rank}", json.dumps(report_of([CaptureRecord.planned(i) for i in schedule])))
        verdict = store.get("schedule").decode()  # rank 0 publishes "ok" or the difference
        if verdict != "ok":
            raise RuntimeError(verdict)

    ex = RankExecutor(cfg, group, device, agree_pages=agree_pages, make_log=make_log,
                      agree_schedule=agree_schedule)
    store.set(f"captured/{rank}", json.dumps(report_of(ex.capture_log.records)))
    store.set(f"ready/{rank}", "1")
    runner = ex.runner
    while True:
        progress.await_step()
        kind, inputs = receiver.recv(lambda: _alive(spec.leader_pid))
        if kind == "stop":
            break
        progress.begin_step()
        hook.before_forward(rank, progress.step)
        runner.execute(inputs, host_tokens=False)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    receiver.close()


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    spec_path, rank = args[0], int(args[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the process group; rank 0 decides
    with open(spec_path, "rb") as f:
        spec: GroupSpec = pickle.load(f)
    threading.Thread(target=_watch_leader, args=(spec.leader_pid,), daemon=True,
                     name="tp-leader-watch").start()
    code = 0
    try:
        serve(spec, rank, FaultHook.from_env())
    except BaseException:
        code = 1
        tb = traceback.format_exc()
        try:
            with open(spec.error_path(rank), "w") as f:
                f.write(tb)
        except OSError:
            pass
        print(f"[twinserve tp rank {rank}] failed:\n{tb}", file=sys.stderr, flush=True)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # skip interpreter teardown (seconds with torch loaded, frees nothing)


if __name__ == "__main__":
    main()
