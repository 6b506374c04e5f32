"""The published study this project reproduces: its claims file, `conf/claims/rmsnorm_study.yaml`,
loaded by the code that reads any claims file (src.report.read.claims).

The names below are that file's values, for the code and tests that speak of the study itself (its
table beside a sweep's, its preset); the report's claims sections read each chosen file's own values
(`report.claims`, src.report.judge.study). Torch-free and read-only.
"""

from __future__ import annotations

from src.core.norm_yamls import builtin_variants
from src.core.paths import CONF_DIR
from src.report.read.claims import CLAIMS_GROUP, STUDY_FILE, Setting, load

# The study's file names built-in norms only: checked against them, whatever the user's config folders hold.
STUDY = load(STUDY_FILE, builtin_variants(), [CONF_DIR / CLAIMS_GROUP])
TABLE = STUDY.table
SETTING: Setting = STUDY.setting  # type: ignore[assignment]
CLAIMS = STUDY.claims
PRESET = SETTING.preset
MODEL_AXES, STUDY_CODE = SETTING.model_axes, SETTING.code
