"""Which code made the reported runs: rows of other code are marked, a mix of code is said.

Each training run records its code fingerprint (src.tracking.code). The reference is the code of
the experiment's latest sweep (the code that decided what to train or reuse), else of its latest
run; a row whose runs another code made (kept with `sweep.on_code_change=keep`, or recorded before
code fingerprints) says so and at which commit, and an experiment whose runs come from more than
one code says how many of each. Torch-free.
"""

from __future__ import annotations

import pandas as pd

from src.tracking.store import Store
from src.tracking.sweep import latest_sweep_run
from src.tracking.tags import CODE_FINGERPRINT_TAG

OTHER_CODE = "made by other code"
UNKNOWN_CODE = "code not recorded"  # a run from before code fingerprints


def reference_code(store: Store, experiment_id: str, runs: pd.DataFrame) -> str:
    """The latest sweep's code fingerprint, else the latest run's ("" when neither has one)."""
    sweep = latest_sweep_run(store, experiment_id)
    tag = sweep.data.tags.get(CODE_FINGERPRINT_TAG, "") if sweep is not None else ""
    if tag or runs.empty or "code" not in runs:
        return tag
    return str(runs.sort_values("start_time", kind="stable").code.iloc[-1])


def _commits(runs: pd.DataFrame) -> str:
    return ", ".join(dict.fromkeys(c or "unknown" for c in runs.commit))


def mark_rows(table: pd.DataFrame, runs: pd.DataFrame, reference: str) -> pd.DataFrame:
    """The table with each variant's note saying which of its runs other code made (and at which commit)."""
    if "code" not in runs or not reference:
        return table
    notes = []
    for variant, note in zip(table.variant, table.notes, strict=True):
        of_variant = runs[runs.variant == variant]
        other = of_variant[of_variant.code != reference]
        if not other.empty:
            count = "" if len(other) == len(of_variant) else f"{len(other)}/{len(of_variant)} "
            unknown = f", {UNKNOWN_CODE}" if (other.code == "").any() else ""
            mark = f"{count}{OTHER_CODE} (commit {_commits(other)}{unknown})"
            note = f"{note}; {mark}" if note else mark
        notes.append(note)
    return table.assign(notes=notes)


def code_sentence(runs: pd.DataFrame, reference: str) -> str:
    """One sentence when the runs come from more than one code, or from code other than the reference."""
    if "code" not in runs or runs.empty or (reference and (runs.code == reference).all()):
        return ""
    if not reference and runs.code.nunique() == 1:
        return ""  # one code throughout, none recorded for the sweep: nothing to tell apart
    parts = []
    for code, group in runs.groupby("code", sort=False):
        which = "the latest sweep's code" if code == reference else UNKNOWN_CODE if not code else f"code {code[:8]}"
        parts.append(f"{len(group)} by {which} (commit {_commits(group)})")
    return (
        f"These runs come from {runs.code.nunique()} code version(s): {'; '.join(parts)}. Rows marked "
        f"'{OTHER_CODE}' hold results the latest sweep's code did not make (kept with sweep.on_code_change=keep, "
        "or recorded before code fingerprints)."
    )
