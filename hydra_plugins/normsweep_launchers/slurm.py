"""The SLURM launcher under the name Hydra accepts (src.launch.slurm_launcher holds the code).

Hydra 1.3 instantiates a launcher only from a class in the `hydra_plugins` namespace; cluster=slurm
sets `hydra.launcher._target_` here.
"""

from src.launch import slurm_launcher


class SlurmSweepLauncher(slurm_launcher.SlurmSweepLauncher):
    __doc__ = slurm_launcher.SlurmSweepLauncher.__doc__
