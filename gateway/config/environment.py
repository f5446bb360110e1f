"""The prefix of the environment variables that configure the gateway (`CEDARBERG_...`).

In a module of its own, without pydantic: the settings loader (`settings`) reads the variables
it names, and the commands that only need to know whether any is set (`gateway.cli.deployment`)
ask without loading the settings models.
"""

ENV_PREFIX = "CEDARBERG_"
