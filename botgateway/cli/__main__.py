"""``python -m botgateway.cli``: the same as the ``botgateway`` console script."""

import sys

from botgateway.cli.main import main

sys.exit(main())
