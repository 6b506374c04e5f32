"""Preflight: check a run or a sweep, and estimate its memory, time and cost, before it starts.

`python -m src.preflight <overrides>` (with `-m`: every job of the sweep) composes each job as
training would, validates it, builds its model on the meta device, estimates the peak memory per
device (`memory`), the wall time and device-hours (`cost`), checks the data, the tracking store and
the checkpoint disk (`checks`), and prints one table (`table`). `preflight.steps=N` adds a dress
rehearsal: N real optimizer steps of each job on this machine, measured against the estimate
(`rehearsal`). Nothing is trained and nothing is recorded.
"""
