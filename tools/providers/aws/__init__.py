"""AWS: its servers (:mod:`.servers`) and the rest of its estate (:mod:`.estate`, mapped in :mod:`.mapping`).

Importing this package never imports the SDKs; their modules are named in
``SDK_MODULES`` so the catalog can check them first.
"""

from tools.providers.aws.servers import SDK_MODULES, AwsProvider

__all__ = ["SDK_MODULES", "AwsProvider"]
