"""The registry: namespaces, catalog objects (tables and views), idempotency records, metrics."""
