"""The preflight table: one row per job, then the sweep's totals and every reason a job would fail."""

from __future__ import annotations

from collections.abc import Sequence

from src.core.tables import text_table
from src.preflight.checks import gib
from src.preflight.job import JobReport
from src.preflight.jobs import SeedRounds
from src.preflight.rehearsal import Rehearsal

HEADERS = (
    "job", "params", "FLOPs/token", "steps", "tokens (per param)", "batch: micro x accum x devices",
    "memory/device (est. of card)", "data", "store", "checkpoints", "time/job", "device-h", "status",
)  # fmt: skip
REHEARSAL_HEADERS = ("job", "device", "precision", "micro-batch", "s/step", "measured peak", "estimate", "est./measured")


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "— (preflight.peak_tflops)"
    hours = seconds / 3600
    return f"{hours:,.1f} h" if hours >= 1 else f"{seconds / 60:,.1f} min"


def _status(job: JobReport) -> str:
    statuses = {f.status for f in job.findings.values()}
    return "FAIL" if "fail" in statuses else "warn" if "warn" in statuses else "ok"


def job_row(job: JobReport) -> list[str]:
    cells = {name: finding.cell for name, finding in job.findings.items()}
    if job.stats is None or job.budget is None:
        return [job.name, *["—"] * (len(HEADERS) - 2), "FAIL"]
    b, s = job.budget, job.stats
    hours = job.time.device_hours if job.time else None
    return [
        job.name,
        f"{s.n_params:,}",
        f"{s.flops_per_token / 1e9:,.3f} G",
        f"{b.max_steps:,}",
        f"{b.total_tokens:,} ({b.total_tokens / s.n_params:,.3g})",
        f"{b.global_batch_size // (b.grad_accum * job.devices)} x {b.grad_accum} x {job.devices} = {b.global_batch_size}",
        cells.get("memory", "—"),
        cells.get("data", "—"),
        cells.get("store", "—"),
        cells.get("checkpoints", "—"),
        duration(job.time.seconds if job.time else None),
        "—" if hours is None else f"{hours:,.1f}",
        _status(job),
    ]


def sweep_summary(jobs: Sequence[JobReport], rounds: SeedRounds | None = None) -> list[str]:
    timed = [j for j in jobs if j.time and j.time.seconds is not None]
    if not timed:
        return []
    first = timed[0]
    assert first.time is not None and first.card is not None
    total = sum(j.time.seconds for j in timed if j.time and j.time.seconds)
    hours = sum(j.time.device_hours for j in timed if j.time and j.time.device_hours)
    at_once = min(first.at_once, len(timed))
    lines = [
        f"{len(jobs)} job(s) on {first.card.name}, {first.time.devices} device(s) each, at "
        f"{first.time.mfu:.0%} MFU of {first.time.peak_tflops:,.1f} TFLOP/s (preflight.mfu, preflight.peak_tflops): "
        f"{duration(total / at_once)} wall time with {at_once} job(s) at once, {hours:,.1f} device-hours"
    ]
    if rounds is not None:
        # Every variant needs at most max_seeds seeds; the sweeper stops earlier once all is decided.
        most = rounds.max_seeds / rounds.first_seeds
        lines.append(
            f"sequential sweeper: these are its first round ({rounds.first_seeds} seeds per variant); "
            f"if every comparison stays undecided up to {rounds.max_seeds} seeds: {duration(total * most / at_once)}, "
            f"{hours * most:,.1f} device-hours"
        )
    return lines


def render(jobs: Sequence[JobReport], rehearsals: dict[int, Rehearsal], rounds: SeedRounds | None = None) -> str:
    lines = [text_table(list(HEADERS), [job_row(j) for j in jobs]), *sweep_summary(jobs, rounds)]
    if rehearsals:
        rows = [
            [
                jobs[i].name, r.device, r.precision, str(r.micro_batch), f"{r.seconds_per_step:,.2f}",
                gib(r.measured_bytes), gib(r.estimate.total), f"{r.ratio:.2f}",
            ]  # fmt: skip
            for i, r in sorted(rehearsals.items())
        ]
        lines += ["", "dress rehearsal (preflight.steps):", text_table(list(REHEARSAL_HEADERS), rows)]
    # A warning shared by every job (data not prepared yet) is said once.
    notes = list(dict.fromkeys(f"note: {f.reason}" for job in jobs for f in job.findings.values() if f.status == "warn" and f.reason))
    fails = [f"FAIL {job.name}: {reason}" for job in jobs for reason in job.failures]
    return "\n".join([*lines, *(["", *notes] if notes else []), *(["", *fails] if fails else [])])
