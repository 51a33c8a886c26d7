"""The fidelity suite: one engine per model measures its capacity and serves every workload at
25/50/75/90 % of it; the simulator then replays the same runs and the tables are written.

    # on the GPU host (one process per model; the engine is built and warmed up once):
    python -m twinserve.experiments.fidelity_suite engine --model llama3-8b --out RUNS [--budget-s 540]
        [--profile-s 120] [--duration-s 15] [--cap-requests 150] [overrides...]
    # here, after calibrating from RUNS/<model>/profile_steps.parquet:
    python -m twinserve.experiments.fidelity_suite report --out experiments/fidelity/h200 RUNS [sim overrides...]

``engine`` writes, under ``RUNS/<model>/``: ``profile_steps.parquet`` (the profiler's grid plus
replays of *other* trace windows than the measured runs at ``--calib-rate`` and, with
``--calib-loads``, at fractions of the measured capacity: the calibration's input),
``capacity.json`` (per workload: requests sent at once, completion time, req/s) and one run
folder per (workload, load) holding the engine's requests/steps/summary and ``overrides.json``;
``suite.json`` lists the stages, each followed by a ``host_probe`` (the host's speed on one
fixed mixed and one fixed decode step, `bench.host_steps`).
Runs are ordered 25/50/75 % of every workload first, 90 % last, and skipped (listed in
``suite.json``) when the budget runs out; ``--only`` and ``--capacity-from`` (an earlier
``capacity.json``, with ``--profile-s 0``) complete a suite that ran out of time. ``report`` reruns each folder's overrides with
``backend=sim`` (same KV pool size; the overlap loop when the engine overlapped), writes
``compare.md``/``compare.csv``/``step_diff.json`` per run and one ``fidelity.md`` table
(`report`). ``repeat RUNS AGAIN --out OUT`` compares the run
folders two engine sides share (the engine against itself: the floor under the simulator's error).
"""
