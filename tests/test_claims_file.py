"""Claims as data: a claims file's format refused in one line naming the file and key; the study's own
claims read from conf/claims/rmsnorm_study.yaml by the same code; a file of one's own judged in its
own section; the study's eighth claim (a norm's share of a step falls as the model grows) judged from
real interleaved rounds timed on this CPU (src/bench/shares.py)."""

from __future__ import annotations

import contextlib
import re
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from study_runs import made_up_runs, study_section

from src.core.norm_yamls import builtin_variants
from src.core.paths import ConfigError
from src.report.figures.claims import row_label
from src.report.judge.pairs import Margins
from src.report.read.claims import DIFFERENCE, SAVING, TREND, chosen, load, load_all
from src.report.read.published import CLAIMS, STUDY, TABLE
from src.report.read.table import summarize
from src.report.words.headline import reproduced_line
from src.stats.verdicts import ClaimWord

CPU = {"device": "cpu", "precision": "fp32 (matmul precision highest)", "n_params": 1.4e7}
MINE = """
source: {title: my hypothesis, link: https://example.org/notes}
claims:
  - statement: my norm's test loss is within 0.05 nats of nn.RMSNorm's
    metric: test_loss
    parts:
      - {a: torch_rmsnorm, b: hand_rmsnorm, asserts: equivalence, size: [-0.05, 0.05]}
  - statement: my norm's share of a step falls from cpu_small to gpt2_small
    metric: norm_share
    parts:
      - {b: hand_rmsnorm, asserts: trend, sizes: [cpu_small, gpt2_small]}
"""


def write(folder: Path, text: str, name: str = "mine") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(textwrap.dedent(text))
    return folder


# Each malformed file: (what replaces a line of MINE, the key its one line names, a phrase of it).
MALFORMED = {
    "unknown key": ("    metric: test_loss", "    metrc: test_loss", "claims[0].metrc", "no such key"),
    "unknown metric": ("    metric: test_loss", "    metric: perplexity", "claims[0].metric", "train_time_s, test_loss"),
    "unknown variant": ("b: hand_rmsnorm, asserts: equivalence", "b: fancy_norm, asserts: equivalence", "claims[0].parts[0].b",
                        "unknown variant 'fancy_norm'"),
    "low above high": ("size: [-0.05, 0.05]", "size: [0.05, -0.05]", "claims[0].parts[0].size", "low must be <= high"),
    "equivalence off zero": ("size: [-0.05, 0.05]", "size: [0.01, 0.05]", "claims[0].parts[0].size", "holds zero"),
    "unknown size": ("sizes: [cpu_small, gpt2_small]", "sizes: [cpu_small, gpt2_huge]", "claims[1].parts[0].sizes[1]",
                     "unknown model size 'gpt2_huge'"),
    "wrong kind": ("asserts: trend", "asserts: difference", "claims[1].parts[0].asserts", "norm_share is asserted as trend"),
    # Accepted, and wrong, before the format was declared once: each is now refused naming its key.
    "no metric": ("    metric: test_loss\n", "", "claims[0].metric", "required"),
    "no asserts": ("b: hand_rmsnorm, asserts: equivalence,", "b: hand_rmsnorm,", "claims[0].parts[0].asserts", "required"),
    "sizes largest first": ("sizes: [cpu_small, gpt2_small]", "sizes: [gpt2_small, cpu_small]", "claims[1].parts[0].sizes",
                            "smallest first (by parameters): [cpu_small, gpt2_small]"),
    "a size twice": ("sizes: [cpu_small, gpt2_small]", "sizes: [gpt2_small, gpt2_small]", "claims[1].parts[0].sizes[1]",
                     "listed twice"),
    "a on a trend": ("{b: hand_rmsnorm, asserts: trend,", "{a: torch_rmsnorm, b: hand_rmsnorm, asserts: trend,",
                     "claims[1].parts[0].a", "a trend is of b alone"),
    "size on a trend": ("asserts: trend,", "asserts: trend, size: [-0.5, -0.1],", "claims[1].parts[0].size", "not a size"),
    "percent as a number": ("    metric: test_loss", "    metric: train_time_s", "claims[0].parts[0].size", None),
    "a duplicate claim": ("  - statement: my norm's share", "  - statement: my norm's test loss is within 0.05 nats of nn.RMSNorm's\n"
                          "    metric: test_loss\n    parts:\n      - {a: torch_rmsnorm, b: hand_rmsnorm, asserts: equivalence, "
                          "size: [-0.05, 0.05]}\n  - statement: my norm's share", "claims[1]", "the same claim as claims[0]"),
    "open question of a speed claim": ("    metric: test_loss\n", "    metric: test_loss\n    open_question: true\n", None, None),
    "unknown precision": ("claims:\n", "domains:\n  mine: {precision: [fp8]}\nclaims:\n", "domains.mine.precision[0]",
                          "unknown precision 'fp8'; valid choices: bf16_mixed, fp16_mixed, fp32"),
    "too many claims": ("claims:\n", "claims:\n" + "".join(f"  - {{statement: claim {i}, metric: test_loss, parts: [{{a: torch_rmsnorm, "
                        f"b: hand_rmsnorm, asserts: equivalence, size: [-0.{i + 1:03d}, 0.05]}}]}}\n" for i in range(200)),
                        "claims", "at most 200 claims in a file, got 202: split it"),
}  # fmt: skip
# A speed claim written in percents: [-20, -3] read as -2,000% to -300% before.
MALFORMED["percent as a number"] = ("    metric: test_loss\n    parts:\n      - {a: torch_rmsnorm, b: hand_rmsnorm, asserts: equivalence, size: [-0.05, 0.05]}",
                                    "    metric: train_time_s\n    parts:\n      - {a: torch_rmsnorm, b: hand_rmsnorm, asserts: difference, size: [-20, -3]}",
                                    "claims[0].parts[0].size", "sizes of train_time_s are fractions: 0.03 is 3%")
MALFORMED["open question of a speed claim"] = ("    metric: test_loss\n", "    metric: train_time_s\n    open_question: true\n",
                                               "claims[0].open_question", "asked of a test_loss claim")

# A difference whose size and whose file's own table disagree on its side: read as a band holding both
# sides before, so the claimed side was the table's and the interval was held against a band round zero.
_TIMES = "table: {torch_rmsnorm: {train_time_s: 100}, hand_rmsnorm: {train_time_s: %d}}\nclaims:\n  - statement: mine is faster\n" \
         "    metric: train_time_s\n    parts:\n      - {a: torch_rmsnorm, b: hand_rmsnorm, asserts: difference%s}\n"
MALFORMED["a difference with no side in its table"] = ("claims:\n", _TIMES % (100, ""), "claims[0].parts[0].size", "a difference needs a side")
MALFORMED["a size on the other side of its table's figure"] = ("claims:\n", _TIMES % (110, ", size: [-0.2, -0.03]"), "claims[0].parts[0].size",
                                                                "other side of zero from the file's table")

# A saving's difference is read at its largest size, taken as its sizes' last: listed largest first, it
# was read at the smallest; its sizes are held to a trend's order.
_SAVING = "claims:\n  - statement: my norm's saving is modest\n    metric: norm_saving\n    parts:\n      - {a: torch_layernorm, " \
          "b: torch_rmsnorm, asserts: difference, size: [-0.05, 0.0], sizes: [%s]}\n"
MALFORMED["a saving's sizes largest first"] = ("claims:\n", _SAVING % "gpt2_large, gpt2_small", "claims[0].parts[0].sizes",
                                               "smallest first (by parameters): [gpt2_small, gpt2_large]")
MALFORMED["a saving's size twice"] = ("claims:\n", _SAVING % "gpt2_large, gpt2_large", "claims[0].parts[0].sizes[1]", "listed twice")
MALFORMED["a saving with no sizes"] = ("claims:\n", _SAVING % "", "claims[0].parts[0].sizes", "valid choices: cpu_small")


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_file_is_refused_in_one_line_naming_file_and_key(case: str, tmp_path: Path) -> None:
    old, new, key, phrase = MALFORMED[case]
    assert old in MINE
    folder = write(tmp_path / "claims", MINE.replace(old, new, 1))
    with pytest.raises(ConfigError) as err:
        load("mine", builtin_variants(), [folder])
    line = str(err.value)
    assert "\n" not in line and "mine.yaml" in line and f": {key}: " in line and phrase in line, line


def test_the_study_is_a_claims_file_read_by_the_generic_code() -> None:
    assert STUDY.path.parts[-2:] == ("claims", "rmsnorm_study.yaml") and STUDY.heading == "Against the published study"
    assert [c.number for c in CLAIMS] == list(range(1, 9)) and list(TABLE) == list(STUDY.variants)
    eighth = CLAIMS[-1]
    assert eighth.metric == SAVING and [p.asserts for p in eighth.parts] == [TREND, TREND, DIFFERENCE, DIFFERENCE]
    assert {(p.a, p.b) for p in eighth.parts} == {("hand_layernorm", "hand_rmsnorm"), ("torch_layernorm", "torch_rmsnorm")}
    assert eighth.statement.startswith('"While its computational savings scale linearly with model width and depth')
    assert not eighth.domain.cuda and not eighth.domain.gpu  # read on any chip, which its line names
    assert STUDY.trend_sizes() == ("gpt2_small", "gpt2_medium", "gpt2_large")
    with pytest.raises(ConfigError, match=r"report.claims: no claims file 'nope'; valid choices: .*rmsnorm_study"):
        load_all(["rmsnorm_study", "nope"])


def _shares(norm: str, falls: bool, rounds: int = 12) -> dict[str, object]:
    rng = np.random.default_rng(3)
    sizes = ["cpu_small", "gpt2_small"]
    levels = [0.02, 0.012] if falls else [0.02, 0.021]
    return {"shares": {"sizes": sizes, "samples": {norm: {s: list(x * (1 + rng.normal(0, 0.03, rounds))) for s, x in zip(sizes, levels, strict=True)}}}}


def test_own_claims_judged_in_their_own_section(tmp_path: Path) -> None:
    mine = load("mine", builtin_variants(), [write(tmp_path / "claims", MINE)])
    runs = made_up_runs({"torch_rmsnorm": "torch_rmsnorm", "hand_rmsnorm": "hand_rmsnorm"}, **CPU)
    text = study_section(runs, (), _shares("hand_rmsnorm", falls=True), Margins(test_loss=0.1), summarize(runs), source=mine)
    lines = text.lines(120)
    assert lines[0].startswith("Against my hypothesis — The claims of my hypothesis (https://example.org/notes), stated in mine.yaml")
    judged = {c.claim.number: c.word for c in text.judged.claims}
    assert judged[2] == ClaimWord.REPRODUCED  # the share falls, in every round: the trend holds
    assert judged[1] in (ClaimWord.REPRODUCED, ClaimWord.PARTLY)  # equal losses, well within ±0.05 (any device: no domain)
    claim2 = next(line for line in lines if line.startswith("2. "))
    assert "Claimed: the share falls from cpu_small to gpt2_small. This sweep: " in claim2 and "the share at cpu_small " in claim2, claim2
    rises = study_section(runs, (), _shares("hand_rmsnorm", falls=False), Margins(), summarize(runs), source=mine).judged
    assert {c.claim.number: c.word for c in rises.claims}[2] == ClaimWord.NOT_REPRODUCED  # the opposite direction
    # Without share rounds a trend is not listed: the words of a sweep that timed none stay as they were.
    assert [c.claim.number for c in study_section(runs, (), {}, Margins(), source=mine).judged.claims] == [1]


def _savings_check(rounds: int = 10) -> dict[str, object]:
    """Share rounds at claim 8's sizes: hand-rolled RMSNorm saves 40% of LayerNorm's norm time at every
    size (a saving that grows with the size), nn.RMSNorm costs 4× nn.LayerNorm (a cost that grows)."""
    rng = np.random.default_rng(7)
    sizes = ("gpt2_small", "gpt2_medium", "gpt2_large")
    grow = {"gpt2_small": 1.0, "gpt2_medium": 2.7, "gpt2_large": 5.0}  # width × depth, as GPT-2's sizes have it
    rest = {s: list(1.0 * grow[s] * 1.6 * (1 + rng.normal(0, 0.02, rounds))) for s in sizes}  # the blocks' d² outgrow the norms' d
    per = {"hand_layernorm": 0.05, "hand_rmsnorm": 0.03, "torch_layernorm": 0.006, "torch_rmsnorm": 0.024}
    norm_s = {v: {s: list(x * grow[s] * (1 + rng.normal(0, 0.02, rounds))) for s in sizes} for v, x in per.items()}
    return {"shares": {"sizes": list(sizes), "norm_s": norm_s, "rest_s": rest,
                       "samples": {v: {s: [n / (n + r) for n, r in zip(x, rest[s], strict=True)] for s, x in by.items()} for v, by in norm_s.items()}},
            "environment": {"env.device": "Intel Xeon (2 cores)"}}  # fmt: skip


def test_the_eighth_claim_reads_the_savings_the_study_speaks_of() -> None:
    """Claim 8 as the study says it: RMSNorm's saving against LayerNorm grows with width × depth, and at the
    largest size it is a modest share of a step. A saving that is a cost (nn.RMSNorm's on this CPU) is said so."""
    runs = made_up_runs({n: n for n in ("hand_layernorm", "torch_layernorm", "hand_rmsnorm", "torch_rmsnorm")}, **CPU)
    text = study_section(runs, (), _savings_check(), Margins(), summarize(runs))
    (eighth,) = [c for c in text.judged.claims if c.claim.number == 8]
    words = {f.part.label: f.word for f in eighth.findings}
    assert words["hand-rolled"] == ClaimWord.REPRODUCED and words["hand-rolled, modest"] == ClaimWord.REPRODUCED, words
    assert words["built-in"] == ClaimWord.NOT_REPRODUCED and words["built-in, modest"] == ClaimWord.NOT_REPRODUCED, words
    assert eighth.word == ClaimWord.PARTLY
    hand = next(f for f in eighth.findings if f.part.label == "hand-rolled")
    assert hand.effect.diff == pytest.approx(4.0, rel=0.05)  # the saving at gpt2_large is 5× gpt2_small's: +400%
    line = next(x for x in text.lines(100_000) if x.startswith("8. "))
    assert '"While its computational savings scale linearly with model width and depth' in line, line
    assert "the saving grows from gpt2_small to gpt2_large (this check's sizes, not the study's)" in line, line
    assert "hand_rmsnorm's step -5.0% to +0.0% against hand_layernorm's at gpt2_large (this check's size, not the study's)" in line, line
    assert "share check, 10 interleaved rounds on Intel Xeon (2 cores)" in line, line
    assert "the saving's share of a step at gpt2_small" in line, line


def test_the_claims_figure_draws_each_saving_part_and_drops_no_claim() -> None:
    """Claim 8's parts (a saving's trend over sizes, b's step against a's at the largest) each a row, in a
    panel of its own units; every claim judged is drawn or named under "Not drawn"."""
    from src.report.figures.claims import drawn, not_drawn, plot_claims

    runs = made_up_runs({n: n for n in ("hand_layernorm", "torch_layernorm", "hand_rmsnorm", "torch_rmsnorm")}, **CPU)
    judged = study_section(runs, (), _savings_check(), Margins(), summarize(runs)).judged
    fig = plot_claims(judged)
    assert fig is not None
    rows = {ax.get_title(): [t.get_text().split(":")[0] for t in ax.get_yticklabels()] for ax in fig.axes}
    saving = {title: labels for title, labels in rows.items() if any(x.startswith("8 ") for x in labels)}
    assert sorted(map(sorted, saving.values())) == [["8 built-in", "8 hand-rolled"], ["8 built-in, modest", "8 hand-rolled, modest"]], rows
    found = drawn(judged)
    listed = {n for numbers in not_drawn(judged, found).values() for n in numbers}
    assert {c.claim.number for c in judged.claims if any(f in found for f in c.findings)} | listed >= {c.claim.number for c in judged.claims}


def test_a_saving_names_what_it_is_against(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"claims\[0\]\.parts\[0\]\.a: a saving is b's against another variant a"):
        load("bad", builtin_variants(), [write(tmp_path / "claims", """
    claims:
      - statement: RMSNorm's saving grows
        metric: norm_saving
        parts:
          - {b: hand_rmsnorm, asserts: trend, sizes: [gpt2_small, gpt2_large]}
    """, "bad")])


def test_a_trend_every_round_shows_alike_is_reproduced_without_a_figure(tmp_path: Path) -> None:
    """Every share round moved by exactly the same factor: no spread, so no interval, and the sign-flip
    test reads the direction. A trend claims a side, not a size: it read `partly reproduced`, with
    `no interval to hold against its +nan%` (a figure the claim never had)."""
    mine = load("mine", builtin_variants(), [write(tmp_path / "claims", MINE)])
    runs = made_up_runs({"torch_rmsnorm": "torch_rmsnorm", "hand_rmsnorm": "hand_rmsnorm"}, **CPU)
    alike = {"shares": {"sizes": ["cpu_small", "gpt2_small"], "samples": {"hand_rmsnorm": {"cpu_small": [0.02] * 8, "gpt2_small": [0.005] * 8}}}}
    judged = study_section(runs, (), alike, Margins(test_loss=0.1), summarize(runs), source=mine).judged
    trend = next(c for c in judged.claims if c.claim.number == 2)
    assert trend.word == ClaimWord.REPRODUCED
    line = next(line for line in study_section(runs, (), alike, Margins(test_loss=0.1), summarize(runs), source=mine).lines(10_000) if line.startswith("2. "))
    assert "the share falls (every one of 8 share rounds moved by exactly -75.0%" in line and "sign-flip p = 0.0078" in line, line
    assert "nan" not in line and "interval excludes" not in line, line


def test_the_eighth_claim_is_judged_from_rounds_timed_on_this_cpu(tmp_path: Path) -> None:
    """Real rounds (few and small: the test's cost is seconds), judged by the same rule as any claim."""
    import torch

    from src.bench.kernels import cpu_threads
    from src.bench.shares import norm_share_rounds
    from src.model.norms import make_norm

    trend = """
    claims:
      - statement: a norm's share of a step falls as the model grows
        metric: norm_share
        parts:
          - {b: hand_layernorm, asserts: trend, sizes: [cpu_small, gpt2_small]}
    """
    source = load("trend", builtin_variants(), [write(tmp_path / "claims", trend, "trend")])
    with cpu_threads(1):
        shares = norm_share_rounds({"hand_layernorm": lambda d: make_norm("hand_layernorm", d)}, ["cpu_small", "gpt2_small"], 4,
                                   torch.device("cpu"), contextlib.nullcontext, rows=16)  # fmt: skip
    levels = shares["samples"]["hand_layernorm"]
    assert all(0 < x < 1 for size in ("cpu_small", "gpt2_small") for x in levels[size]), levels
    runs = made_up_runs({"hand_layernorm": "hand_layernorm", "torch_layernorm": "torch_layernorm"}, **CPU)
    judged = study_section(runs, (), {"shares": shares}, Margins(), summarize(runs), source=source)
    (claim,) = judged.judged.claims
    assert claim.word in set(ClaimWord) - {ClaimWord.NOT_APPLICABLE, ClaimWord.NOT_TESTED}  # judged in its own domain (any device)
    (finding,) = claim.findings
    assert finding.effect is not None and finding.effect.interval.n == 4 and [s for s, *_ in finding.shares] == ["cpu_small", "gpt2_small"]
    assert "share check, 4 interleaved rounds" in judged.claim_lines()[0]


@pytest.mark.fresh_store
def test_a_malformed_claims_file_stops_the_sweep_before_anything_is_recorded(
    tmp_path: Path, tiny_overrides: list[str], store: dict[str, str]
) -> None:
    from tests.helpers import run_train

    conf = tmp_path / "my_conf"
    write(conf / "claims", MINE.replace("size: [-0.05, 0.05]", "size: [0.05, -0.05]"))
    proc = run_train("-m", "--config-dir", str(conf), "norm=torch_rmsnorm,hand_rmsnorm", "report.claims=[rmsnorm_study,mine]", *tiny_overrides)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("config error: "), lines
    assert "mine.yaml: claims[0].parts[0].size: low must be <= high, got [0.05, -0.05]" in lines[0], lines[0]
    assert not Path(store["db"]).exists()  # no store, no run


def test_a_chosen_trend_adds_its_rounds_to_the_speed_check_and_a_bad_count_is_refused(tmp_path: Path) -> None:
    from test_speed_check import JOBS

    from src.core.paths import compose
    from src.launch.speed_check import bench_command
    from src.training.run_spec import validate

    command = bench_command(JOBS, 20, tmp_path, share=(STUDY.trend_sizes(), 3))
    assert command is not None and command[command.index("--share-sizes") :][:4] == [
        "--share-sizes", "gpt2_small,gpt2_medium,gpt2_large", "--share-rounds", "3"]  # fmt: skip
    assert "--share-sizes" not in (bench_command(JOBS, 20, tmp_path) or [])  # no trend chosen: no rounds
    with pytest.raises(ConfigError, match=r"report.share_rounds: must be 0 .* or an integer >= 2"):
        validate(compose(["report.share_rounds=1"]))


def test_two_chosen_files_of_one_name_are_refused(tmp_path: Path) -> None:
    """Two `my_claims.yaml` in different folders would share a section's heading, its files and its tags."""
    one, two = write(tmp_path / "a", MINE, "twin"), write(tmp_path / "b", MINE, "twin")
    with pytest.raises(ConfigError, match=r"report.claims: two files named twin.yaml .*rename one"):
        load_all([str(one / "twin.yaml"), str(two / "twin.yaml")], builtin_variants())


def _documented() -> dict[str, str]:
    """docs/claims.md's field table: each field's path -> its default column ("required" or a default)."""
    text = (Path(__file__).parents[1] / "docs" / "claims.md").read_text()
    table = text[text.index("| field | type | default | meaning |") :].split("\n\n")[0].splitlines()[2:]
    return {cells[1].strip().strip("`"): cells[3].strip() for cells in (row.split("|") for row in table)}


def test_the_documented_fields_are_the_formats_and_say_which_are_required() -> None:
    from src.report.read.claims import Claim, ClaimsFile, Domain, Part, Published, Setting, Source

    models = {"": ClaimsFile, "source.": Source, "table.<variant>.": Published, "setting.": Setting,
              "domains.<name>.": Domain, "claims[].": Claim, "parts[].": Part}  # fmt: skip
    declared = {f"{prefix}{f.alias or name}": f.is_required() for prefix, model in models.items()
                for name, f in model.model_fields.items()}  # fmt: skip
    documented = _documented()
    assert set(documented) == set(declared), (
        f"docs/claims.md's field table and src/report/read/claims.py differ: only documented "
        f"{sorted(set(documented) - set(declared))}, only declared {sorted(set(declared) - set(documented))}")
    wrong = {k for k, required in declared.items() if (documented[k] == "required") != required}
    assert not wrong, f"docs/claims.md says required where the format has a default, or the reverse: {sorted(wrong)}"


NO_WORSE = """
source: {title: my norm is no worse}
claims:
  - statement: my norm's step is no slower than nn.RMSNorm's by 2% or more
    metric: train_time_s
    parts:
      - {a: torch_rmsnorm, b: hand_rmsnorm, asserts: no_worse, margin: 0.02}
  - statement: my norm's test loss is no worse than nn.RMSNorm's by 0.01 nats or more
    metric: test_loss
    parts:
      - {a: torch_rmsnorm, b: hand_rmsnorm, asserts: no_worse, margin: 0.01}
"""


def test_no_worse_than_is_a_kind_of_its_own(tmp_path: Path) -> None:
    """Non-inferiority, the claim a researcher means by "my norm is no slower": one-sided against its
    margin. Written as a difference of -50% to 0%, the same runs read "not reproduced — the opposite
    direction" beside a +0.08% step, far inside the report's own ±2% margin."""
    mine = load("nw", builtin_variants(), [write(tmp_path / "claims", NO_WORSE, "nw")])
    runs = made_up_runs({"torch_rmsnorm": "torch_rmsnorm", "hand_rmsnorm": "hand_rmsnorm"}, seeds=5)
    rng = np.random.default_rng(1)
    a = runs.variant == "torch_rmsnorm"
    runs.loc[~a, "tokens_per_sec"] = runs.loc[a, "tokens_per_sec"].to_numpy() / 1.0008 * (1 + rng.normal(0, 1e-5, 5))
    runs.loc[~a, "test_loss"] = runs.loc[a, "test_loss"].to_numpy() + 0.03 + rng.normal(0, 1e-4, 5)  # worse by 0.03 nats
    text = study_section(runs, (), {}, Margins(), summarize(runs), source=mine)
    words = {c.claim.number: c for c in text.judged.claims}
    assert words[1].word == ClaimWord.REPRODUCED and words[2].word == ClaimWord.NOT_REPRODUCED
    line1, line2 = (next(x for x in text.lines(10_000) if x.startswith(f"{n}. ")) for n in (1, 2))
    assert "Claimed: at most +2.0% worse training time" in line1 and "no worse than torch_rmsnorm by +2.0%: the interval's upper end +0.1%" in line1, line1
    assert "worse than torch_rmsnorm by +0.0100 or more: the whole interval lies at or beyond it" in line2, line2
    for wrong, key, phrase in ((", margin: 0.02}", "claims[0].parts[0].margin", "says how much worse b may be"),
                               ("margin: 2}", "claims[0].parts[0].margin", "a fraction: 0.02 is 2%")):  # fmt: skip
        text = NO_WORSE.replace(", margin: 0.02}", "}", 1) if wrong.startswith(",") else NO_WORSE.replace("margin: 0.02}", wrong, 1)
        with pytest.raises(ConfigError, match=rf": {re.escape(key)}: .*{re.escape(phrase)}"):
            load("nw", builtin_variants(), [write(tmp_path / key.replace(".", "_") / phrase[:4], text, "nw")])


def test_a_researchers_setting_table_and_set_aside_runs_are_said_of_its_source_not_the_study(tmp_path: Path) -> None:
    """A researcher's file with a table and a setting that fixes `model.init` through a preset: its
    setting lines, its table's columns and its set-aside runs name the file's source, never "the study"."""
    own = """
    source: {title: my notes}
    setting: {device: A100, model: GPT-2 small, n_params: 163009536, tokens: 3260190720, precision: fp16,
              preset: gpt2_small_study, model_axes: [model.init]}
    table: {hand_layernorm: {test_loss: 3.60}, torch_layernorm: {test_loss: 3.58}}
    claims:
      - statement: my norm's test loss is within 0.05 nats of nn.LayerNorm's
        metric: test_loss
        parts:
          - {a: torch_layernorm, b: hand_layernorm, asserts: equivalence, size: [-0.05, 0.05]}
    """
    mine = load("mine", builtin_variants(), [write(tmp_path / "claims", own)])
    frames = []
    for init in ("study", "gpt2"):
        runs = made_up_runs({"hand_layernorm": "hand_layernorm", "torch_layernorm": "torch_layernorm"}, **CPU)
        frames.append(runs.assign(**{"model.init": init}, variant=runs.variant + f" · init={init}", run_id=runs.run_id + init))
    runs = pd.concat(frames, ignore_index=True)
    text = study_section(runs, (), {}, Margins(test_loss=0.1), summarize(runs), source=mine)
    (line,) = (x for x in text.lines(10_000) if "set aside" in x)
    assert "model.init=gpt2 (the source model.init=study)" in line, line
    assert "test loss (source)" in text.table[0], text.table[0]
    assert "study" not in "\n".join(text.lines(10_000)).replace("init=study", ""), text.lines(10_000)
    # The sweep ran none of its variants: its section says so of its source.
    none = study_section(made_up_runs({"torch_rmsnorm": "torch_rmsnorm"}, **CPU), (), {}, Margins(), source=mine)
    assert none.lines() == ["Against my notes: this sweep ran none of the source's variants (hand_layernorm, torch_layernorm); nothing to compare."]
    assert reproduced_line(none.judged) == "Claims of mine.yaml? Not here: this sweep ran none of the source's variants (hand_layernorm, torch_layernorm); nothing to compare."


def test_a_researchers_contrast_names_its_own_pairs_not_the_studys_norms(tmp_path: Path) -> None:
    """A `minus` part of a researcher's file quotes its figure as the gap of its own pairs, by their
    variants: "the built-ins' ... less the hand-rolled ..." is true of the study's claim only."""
    own = """
    source: {title: my notes}
    table: {hand_layernorm: {train_time_s: 9000}, hand_rmsnorm: {train_time_s: 8900},
            torch_layernorm: {train_time_s: 8000}, torch_rmsnorm: {train_time_s: 7800}}
    claims:
      - statement: my RMSNorm's edge over LayerNorm is wider in torch's pair than in mine
        metric: train_time_s
        parts:
          - {a: torch_layernorm, b: torch_rmsnorm, asserts: difference, minus: [hand_layernorm, hand_rmsnorm]}
    """
    mine = load("mine", builtin_variants(), [write(tmp_path / "claims", own)])
    runs = made_up_runs({v: v for v in ("hand_layernorm", "hand_rmsnorm", "torch_layernorm", "torch_rmsnorm")}, **CPU)
    own_section = study_section(runs, (), {}, Margins(), summarize(runs), source=mine)
    (line,) = (x for x in own_section.lines(10_000) if x.startswith("1. "))
    assert "Source: -1.4 pp training time (torch_rmsnorm vs torch_layernorm -2.5% less hand_rmsnorm vs hand_layernorm -1.1%)" in line, line
    assert "built-in" not in line and "hand-rolled" not in line, line
    # The study's own claim keeps its words.
    section = study_section(runs, (), {}, Margins(), summarize(runs))
    assert any("(the built-ins' -0.4% less the hand-rolled -2.4%)" in x for x in section.lines(10_000)), section.lines(10_000)
    # Its figure's row names the pairs as its sentence does (one writer: Part.contrast_names).
    parts = ([(s, f) for c in s.claims for f in c.findings if f.part.minus] for s in (own_section.judged, section.judged))
    ((mine_row,), (study_row,)) = ([row_label(*x) for x in found] for found in parts)
    assert mine_row.startswith("1: torch_rmsnorm vs torch_layernorm gap − hand_rmsnorm vs hand_layernorm gap\n"), mine_row
    assert study_row.startswith("3 shrank: the built-ins' gap − the hand-rolled gap\n"), study_row


def test_a_researchers_file_named_as_the_studys_is_asked_of_as_its_own(tmp_path: Path) -> None:
    """A file of one's own that shares the study's file name (`report.claims=[/my/rmsnorm_study.yaml]`)
    is not the study: its headline asks of its claims, as its section speaks of them."""
    mine = load("rmsnorm_study", builtin_variants(), [write(tmp_path / "claims", MINE, "rmsnorm_study")])
    runs = made_up_runs({"torch_rmsnorm": "torch_rmsnorm", "hand_rmsnorm": "hand_rmsnorm"}, **CPU)
    line = reproduced_line(study_section(runs, (), {}, Margins(test_loss=0.1), summarize(runs), source=mine).judged)
    assert line.startswith("Claims of rmsnorm_study.yaml? 1 of its 2 claims tested"), line
    assert "study" not in line.replace("rmsnorm_study", ""), line


def test_report_claims_given_one_name_not_a_list_is_refused_saying_so() -> None:
    """`report.claims=rmsnorm_study` on a command line is a string: refused as not a list, not read as
    the files `r`, `m`, ... (the first of which was refused as unknown)."""
    with pytest.raises(ConfigError, match=r"report.claims: a list of claims files' names, e.g. \[rmsnorm_study, my_claims\], got 'rmsnorm_study'"):
        chosen({"claims": "rmsnorm_study"})
    assert [f.name for f in chosen({"claims": ["rmsnorm_study"]})] == ["rmsnorm_study"]
