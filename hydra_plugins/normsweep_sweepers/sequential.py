"""The sequential sweeper under the name Hydra accepts (src.launch.sequential holds the code).

Hydra 1.3 instantiates a sweeper only from a class whose module lies in `hydra_plugins` (its
plugin scanner imports that namespace package); `_target_` in conf/hydra/sweeper/sequential.yaml
points here.
"""

from src.launch import sequential


class SequentialSweeper(sequential.SequentialSweeper):
    __doc__ = sequential.SequentialSweeper.__doc__
