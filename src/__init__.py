"""normsweep: which normalization layer should your GPT train with?"""

import os

# MLflow's usage telemetry stays off unless the user turns it on (MLFLOW_DISABLE_TELEMETRY=false): a
# run is offline by design (cluster nodes often reach nothing outside), and MLflow starts the client
# that sends it as MLflow is imported, so it is set here, before any module of the package loads MLflow.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
