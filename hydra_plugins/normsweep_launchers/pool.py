"""The pool launcher under the name Hydra accepts (src.launch.pool_launcher holds the code).

Hydra 1.3 instantiates a launcher only from a class in the `hydra_plugins` namespace;
conf/cluster/cpu_pool.yaml and gpu_pool.yaml point here.
"""

from src.launch import pool_launcher


class PoolLauncher(pool_launcher.PoolLauncher):
    __doc__ = pool_launcher.PoolLauncher.__doc__
