"""Tencent Cloud: its servers (:mod:`.servers`) and the rest of its estate (:mod:`.estate`, mapped in :mod:`.mapping`).

Importing this package never imports the SDKs; their modules are named in
``SDK_MODULES`` so the catalog can check them first.
"""

from tools.providers.tencent.servers import SDK_MODULES, TencentProvider

__all__ = ["SDK_MODULES", "TencentProvider"]
