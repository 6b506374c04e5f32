"""MLflow's own UI server, with the page it serves opening on the result (`python -m src.ui` runs it).

MLflow 3.17's UI chooses its *GenAI* or *Model training* side from the address or from the
browser's remembered toggle (`localStorage["mlflow.workflowType_v1"]`, GenAI when unset), and an
experiment's columns, unfolded rows and chart order from the browser's saved view of it
(`localStorage['MLflowLocalStorage-1.1-ExperimentPage-["<id>"]-ReactComponentState']`): nothing a
logging client writes reaches either, so an experiment clicked from the home page opened on an
empty GenAI overview. This app is MLflow's (its `fastapi_app`, unchanged) with one script added to
the page it serves, which, in a browser that has not chosen otherwise:

- sets the training side (a user's own toggle, once made, stays theirs);
- gives each experiment that carries normsweep's start view (`START_VIEW_TAG`, written with the
  shared view: src/tracking/ui_view.py) that view as its saved view: the results as columns, the
  sweep runs unfolded over their jobs, every training run charted, the loss curves first;
- gives each run of such an experiment the same chart order on its own page (a job opens on its
  loss curve, not on MLflow's alphabetical first, `perf/...`);
- gives each variant's group (runs grouped by variant) its runs' colour, the figures' one;
- keeps MLflow's Assistant panel closed (it opens itself once per browser, over a quarter of the
  page; its button stays).

Run as `python -m src.tracking.ui_app ui [mlflow ui options]`: MLflow's own command and server,
serving this app as MLflow serves a plugin app (`--app-name normsweep`), found by the `mlflow.app`
entry point pyproject.toml registers (installed by `pip install -e .`; without it, MLflow's own
page after one warning line). Torch-free.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from src.core.terminal import say
from src.tracking.tags import RUN_COLOR_TAG
from src.tracking.ui_view import GROUP_TAG, START_VIEW_TAG

APP_NAME = "normsweep"
APP = "src.tracking.ui_app:app"
WORKFLOW_KEY = "mlflow.workflowType_v1"
TRAINING = "machine_learning"
SAVED_VIEW_KEY = 'MLflowLocalStorage-1.1-ExperimentPage-["{}"]-ReactComponentState'

# MLflow opens its Assistant panel (a quarter of the screen) once per browser, on the first page it
# serves, and remembers that it did under this key: set first, the panel stays closed until asked for.
ASSISTANT_OPENED_KEY = "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1"
# A run's own page keeps its chart layout under this key (`<run id>-model`: its model-metrics tab).
RUN_CHARTS_KEY = "MLflowLocalStorage-1.1-RunPage-{}-model-chartUIState"
# The colours of the runs table's groups, by group id (`tag.variant.<variant>` when grouped by variant): MLflow
# picks a group's colour from a hash of its id (dyt and hand_rmsnorm were one yellow), so each group gets
# its variant's runs' colour (`mlflow.runColor`, the report figures' colour) unless the user chose one.
GROUP_COLORS_KEY = "experimentRunColors"
RUN_CHART_KEYS = ("compareRunCharts", "compareRunSections", "isAccordionReordered")  # the start view's, reused

# Plain ES5, run before MLflow's own bundle; any failure leaves MLflow's defaults in place.
SCRIPT = """<script>(function(){try{
var ls=window.localStorage;
if(!ls.getItem(%(workflow)s))ls.setItem(%(workflow)s,JSON.stringify(%(training)s));
if(!ls.getItem(%(assistant)s))ls.setItem(%(assistant)s,"true");
function post(path,body,then){var x=new XMLHttpRequest();
x.open("POST","ajax-api/2.0/mlflow/"+path,true);
x.setRequestHeader("Content-Type","application/json");
x.onload=function(){try{then(JSON.parse(x.responseText));}catch(err){}};
x.send(JSON.stringify(body));}
function runCharts(id,view){var charts={autoRefreshEnabled:true,
globalLineChartConfig:{xAxisKey:"step",lineSmoothness:0,selectedXAxisMetricKey:""}};
%(run_chart_keys)s.forEach(function(k){charts[k]=view[k];});
post("runs/search",{experiment_ids:[id],max_results:1000},function(r){
var colors={};try{colors=JSON.parse(ls.getItem(%(group_colors)s)||"{}");}catch(err){}
(r.runs||[]).forEach(function(run){var k=%(run_charts)s.replace("{}",run.info.run_id);
if(!ls.getItem(k))ls.setItem(k,JSON.stringify(charts));
var tags={};(run.data.tags||[]).forEach(function(t){tags[t.key]=t.value;});
var g=%(group_prefix)s+tags[%(variant_tag)s];
if(tags[%(variant_tag)s]&&tags[%(color_tag)s]&&!colors[g])colors[g]=tags[%(color_tag)s];});
ls.setItem(%(group_colors)s,JSON.stringify(colors));});}
post("experiments/search",{max_results:1000},function(r){
(r.experiments||[]).forEach(function(e){
(e.tags||[]).forEach(function(t){
if(t.key!==%(tag)s)return;
var k=%(saved)s.replace("{}",e.experiment_id);
if(!ls.getItem(k))ls.setItem(k,t.value);
runCharts(e.experiment_id,JSON.parse(t.value));
});});});
}catch(err){}})();</script>"""


def page_script() -> str:
    return SCRIPT % {
        "workflow": json.dumps(WORKFLOW_KEY),
        "training": json.dumps(TRAINING),
        "assistant": json.dumps(ASSISTANT_OPENED_KEY),
        "tag": json.dumps(START_VIEW_TAG),
        "saved": json.dumps(SAVED_VIEW_KEY),
        "run_charts": json.dumps(RUN_CHARTS_KEY),
        "run_chart_keys": json.dumps(list(RUN_CHART_KEYS)),
        "group_colors": json.dumps(GROUP_COLORS_KEY),
        "group_prefix": json.dumps(f"tag.{GROUP_TAG}."),
        "variant_tag": json.dumps(GROUP_TAG),
        "color_tag": json.dumps(RUN_COLOR_TAG),
    }


def with_script(page: str) -> str:
    """MLflow's index.html with the script first in its head (before the bundle reads the storage)."""
    return page.replace("<head>", "<head>" + page_script(), 1)


def _serve_page():  # noqa: ANN202 (a Flask view)
    from flask import Response
    from mlflow.server import app as flask_app

    index = Path(str(flask_app.static_folder)) / "index.html"
    if not index.exists():
        return _mlflow_serve()
    return Response(with_script(index.read_text(encoding="utf-8")), mimetype="text/html")


# The MLflow and Flask whose internals this app patches (the page's view in Flask's view table,
# MLflow 3.17's browser keys above); any other: MLflow's own UI.
STARLETTE_WSGI_WARNING = r"starlette\.middleware\.wsgi is deprecated"
UI_WRITTEN_FOR = {"mlflow": ">=3.17,<3.18", "flask": ">=3.0,<4"}
UI_PATCH = "the UI's start page (src/tracking/ui_app.py)"
UI_INSTEAD = "MLflow serves its own page unchanged (open an experiment's printed link)"


def ui_patchable() -> bool:
    from src.core.patches import patchable

    return patchable(UI_PATCH, UI_WRITTEN_FOR, UI_INSTEAD)


if __name__ != "__main__":  # imported by the server's workers (and once by MLflow's command, to check it)
    import warnings

    # MLflow's FastAPI app imports Starlette's WSGI middleware, which warns at import that it is deprecated:
    # 265 characters, twice, addressed to MLflow's developers, not to a user browsing runs. That one warning only.
    warnings.filterwarnings("ignore", message=STARLETTE_WSGI_WARNING)
    from mlflow.server import app as _flask_app
    from mlflow.server.fastapi_app import app  # noqa: F401  (what uvicorn serves)

    if ui_patchable() and "serve" in _flask_app.view_functions:
        _mlflow_serve = _flask_app.view_functions["serve"]
        _flask_app.view_functions["serve"] = _serve_page


def registered() -> bool:
    """Whether MLflow finds this app by its name: the `mlflow.app` entry point of pyproject.toml, installed."""
    from importlib.metadata import entry_points

    return any(e.name == APP_NAME and e.value == APP for e in entry_points(group="mlflow.app"))


def main(argv: list[str]) -> int:
    """MLflow's command line (`ui ...`), serving this app by its plugin name where it is registered."""
    from mlflow.cli import cli

    if ui_patchable() and registered():
        argv = [*argv, "--app-name", APP_NAME]
    elif ui_patchable():
        say(f"[normsweep] warning: {UI_PATCH} left out: the `mlflow.app` entry point {APP_NAME} is not installed "
            f"(pip install -e . in the repository); {UI_INSTEAD}", sys.stderr)
    return int(cli.main(argv, standalone_mode=False) or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
