"""The one-node launcher under the name Hydra accepts (src.launch.node_launcher holds the code).

Hydra 1.3 instantiates a launcher only from a class in the `hydra_plugins` namespace;
conf/hydra/launcher/node.yaml points here.
"""

from src.launch import node_launcher


class NodeLauncher(node_launcher.NodeLauncher):
    __doc__ = node_launcher.NodeLauncher.__doc__
