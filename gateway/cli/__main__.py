"""``python -m gateway.cli``: the `cedarberg` command."""

import sys

from gateway.cli.main import main

sys.exit(main())
