"""Named cases the property test (tests/test_report_properties.py) found on generated sweeps, each
shrunk to the smallest sweep that broke an invariant, kept here so that it stays fixed whatever the
generator draws next. Each goes through the real path (`assemble`, then every output)."""

from __future__ import annotations

import numpy as np
from made_up_sweeps import STUDY, MadeUp
from study_runs import made_up_runs
from test_report_properties import INVARIANTS, analysis_of, outputs

from src.report.numbers import LOG_RATIO, NATS, estimate_text
from src.report.render.terminal import terminal_text
from src.report.words.pairs import heading


def _holds(made: MadeUp) -> str:
    """Every invariant holds on the sweep; its terminal text, for the case's own checks."""
    a = analysis_of(made)
    out = outputs(a)
    for invariant in INVARIANTS:
        invariant(a, out)
    return terminal_text(a, width=10_000)


def test_every_seed_alike_still_writes_the_open_question() -> None:
    """Every seed gave each variant the same loss (no seed spread at all): the study's open question
    divided by that spread and the report could not be written."""
    runs = made_up_runs({v: v for v in ("hand_layernorm", "torch_layernorm")}, seeds=3, **STUDY)
    runs["test_loss"] = np.where(runs.variant == "hand_layernorm", 3.6, 3.59)
    text = _holds(MadeUp(runs))
    assert "the same on every seed here" in text and "no seed spread to set the study's single-seed gaps against" in text


def test_a_family_of_untestable_pairs_prints_the_tests_adjusted() -> None:
    """Two variants identical on every seed have no p-value: Holm adjusts over none, and the heading
    used to say "Holm-adjusted over 1 comparisons"."""
    runs = made_up_runs({v: v for v in ("hand_layernorm", "torch_layernorm")}, seeds=3)
    runs["test_loss"] = np.repeat([3.6, 3.61, 3.62], 1).tolist() * 2
    made = MadeUp(runs)
    _holds(made)
    assert "Holm-adjusted over nothing: the one comparison has no p-value;" in heading(analysis_of(made))


def test_an_interval_narrower_than_its_printed_digits_widens_them() -> None:
    """A step-time estimate of -0.002% with a 95% interval 2e-6 wide printed `-0.0% [-0.0%, -0.0%]`;
    a gap of 1e-5 nats `-0.0000 [-0.0000, -0.0000]`: the decimals now widen until the ends read apart."""
    assert estimate_text(-2e-5, -2.1e-5, -1.9e-5, 0.95, LOG_RATIO) == "-0.0020% [-0.0021%, -0.0019%] (95% interval)"
    assert estimate_text(-1e-5, -1.2e-5, -0.4e-5, 0.9, NATS) == "-0.00001 [-0.00001, -0.00000] (90% interval)"
    assert estimate_text(0.3, 0.3, 0.3, 0.95, NATS) == "+0.3000 (its 95% interval narrower than the last digit)"


def test_a_saving_is_not_read_through_the_pairs_loss_decision() -> None:
    """A sequential sweep's test-loss decision on hand_layernorm vs hand_rmsnorm was read as the
    direction of claim 8's saving over model sizes (timed in the speed check's share rounds, which no
    sequential sweep decides): "the direction is undecided; the study's +nan% is outside it" beside an
    interval wholly below zero."""
    from src.report.judge.sequential import SequentialVerdict
    from src.stats.pairs import pair_label
    from src.stats.verdicts import SequentialWord

    norms = ("hand_layernorm", "hand_rmsnorm")
    runs = made_up_runs({v: v for v in norms}, seeds=2, device="cpu")
    sizes, rounds = ("gpt2_small", "gpt2_medium", "gpt2_large"), 7
    rng = np.random.default_rng(3)
    rest = {s: list(2.0**i * (1 + rng.normal(0, 0.01, rounds))) for i, s in enumerate(sizes)}
    # hand_rmsnorm's norms cost more than hand_layernorm's, more so as the model grows: the saving falls.
    norm_s = {v: {s: list(0.02 * (1 + (0.5 * i if v == "hand_rmsnorm" else 0)) * 2**i * (1 + rng.normal(0, 0.01, rounds)))
                  for i, s in enumerate(sizes)} for v in norms}  # fmt: skip
    samples = {v: {s: [n / (n + r) for n, r in zip(x, rest[s], strict=True)] for s, x in by.items()} for v, by in norm_s.items()}
    check = {"shares": {"sizes": list(sizes), "samples": samples, "norm_s": norm_s, "rest_s": rest}}
    decision = SequentialVerdict(pair_label(*norms), "test_loss", SequentialWord.UNTESTABLE, 1, 2, 0.01, 0.004)
    text = _holds(MadeUp(runs, check=check, sequential=[decision]))
    line = next(x for x in text.splitlines() if x.lstrip().startswith("8. "))
    assert "hand-rolled: the opposite direction" in line and "sequential" not in line, line
