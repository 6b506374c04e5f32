"""Registers the training config's schema (src.core.schema) in Hydra's ConfigStore.

Hydra imports every module of the `hydra_plugins` namespace before it composes a config (in
`python -m src.train`, in `src.core.paths.compose`, in a launcher's worker), so conf/train.yaml's
`train_schema` is found whichever way the config is composed.
"""

from src.core.schema import register

register()
