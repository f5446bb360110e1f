"""Object storage of S3 warehouses: the S3 scope of a table, vended credentials, remote signing,
and the FileIO/engine properties of a warehouse (its settings live in `gateway.config.storage`).
Below `gateway.web`: knows nothing of requests."""
