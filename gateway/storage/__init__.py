"""Object storage of S3 warehouses: the S3 scope of a table, vended credentials, remote signing,
and their settings. Below `gateway.web`: knows nothing of requests."""
