"""The `cedarberg` command line: every command, each parsed here and run by the layer it names
(`serve` by `gateway.serve`, `keys`/`policies`/`kms`/`db` offline against the configured store).

Run as ``cedarberg ...`` or ``python -m cedarberg.gateway.cli ...``.
"""

from cedarberg.gateway.cli.main import main

__all__ = ["main"]
