"""Tensor parallelism: one process per rank, rank 0 schedules and broadcasts each step.

- `comm`: the torch.distributed backend (NCCL on GPU, gloo on CPU) and the `TPGroup` over it;
- `channel`: the per-step control channel (rank 0 → other ranks, ZMQ over IPC);
- `leader`: rank 0's side (starts and watches the other ranks, agrees the pool size, sends steps);
- `follower`: the process every other rank runs (``python -m twinserve.engine.tp.follower``);
- `errors`: `TPGroupError`, raised on rank 0 when any rank fails.

See docs/engine.md, "Tensor parallelism", for the design.
"""
