"""``python -m cedarberg.gateway.cli``: the `cedarberg` command."""

import sys

from cedarberg.gateway.cli.main import main

sys.exit(main())
