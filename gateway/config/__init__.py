"""The gateway's settings in one home (`settings.Settings`, loaded from TOML, environment and
flags) and the configuration reference rendered from them."""
