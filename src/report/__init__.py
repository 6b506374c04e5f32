"""The sweep report: MLflow runs -> table, paired comparisons and figures -> files on the sweep's run.

    python -m src.report [--experiment-name NAME] [--margin-loss M] [--margin-speed M] [overrides]

- `analysis`: `analyze` reads everything from the tracker into an `Analysis` (the data and its prose);
- `render.terminal`, `render.markdown`, `render.html`: the same report for a terminal, `report.md`
  (and the verdict MLflow shows on the sweep's run) and `report.html`;
- `files`: `write` puts the pages, CSVs and figures in `reports/<experiment>/`;
- `generate`: `generate_report` writes an analysis's files and attaches them to the sweep's parent run
  (`report/`), where MLflow's artifact viewer shows `report.html` with its figures inline and the
  CSVs as grids.

This file imports nothing: it runs before every module of the package, and a sweep reads the claims
format and the report's settings (`read.claims`, `read.settings`) before its first job, without the
analysis's pandas, scipy, matplotlib and MLflow (tests/test_architecture.py checks it).
"""
