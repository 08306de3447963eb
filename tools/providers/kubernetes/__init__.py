"""Kubernetes: the estate of kubeconfig contexts (:mod:`.source`), its objects mapped in :mod:`.mapping`.

Importing this package never imports the ``kubernetes`` client; ``SDK_MODULES``
names it so the catalog can check it first.
"""

from tools.providers.kubernetes.source import SDK_MODULES, KubernetesEstate

__all__ = ["SDK_MODULES", "KubernetesEstate"]
