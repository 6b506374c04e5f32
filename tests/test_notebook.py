"""notebooks/analysis.ipynb runs top to bottom against a real (tiny) sweep and draws its figures."""

from __future__ import annotations

import nbformat
import pytest
from helpers import EXPERIMENT, REPO, TinySweep
from nbclient import NotebookClient

NOTEBOOK = REPO / "notebooks" / "analysis.ipynb"


def test_notebook_is_saved_without_outputs() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


@pytest.mark.slow
def test_notebook_runs_and_draws_figures(tiny_sweep: TinySweep, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NORMSWEEP_EXPERIMENT", EXPERIMENT)
    monkeypatch.setenv("NORMSWEEP_TRACKING_URI", tiny_sweep.uri)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # The kernel inherits this environment; running in the repo root makes `import src` work.
    NotebookClient(nb, kernel_name="python3", timeout=180, resources={"metadata": {"path": str(REPO)}}).execute()

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if o.output_type == "display_data" and "image/png" in o.data]
    assert len(images) == 3  # the claims, the loss curves and the speed check's pairs
    code = [c for c in nb.cells if c.cell_type == "code"]
    calls = ("plot_claims(", "plot_losses(", "plot_speed(", "plot_by_axis(")
    drawn = {call: sum("image/png" in o.get("data", {}) for c in code if call in c.source for o in c.outputs) for call in calls}
    assert drawn == dict(zip(calls, (1, 1, 1, 0), strict=True))  # its variants are norms: no numeric axis to draw along
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert f"'{EXPERIMENT}': 6 runs" in text and "torch_layernorm vs hand_layernorm" in text
    assert "Against the published study — " in text and "5. not applicable here — the built-ins' test loss" in text  # the report's section
    assert "test loss (study)" in text and "The study's open question" in text  # its table beside the sweep's
