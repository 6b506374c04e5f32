"""The report command's other modes: `--plan` (a sequential sweep's forecast from a pilot) and
`--status` (every job of a sweep with its state). src/report/__main__.py parses and dispatches."""
