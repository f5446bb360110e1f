"""Helpers shared by the test suite: ports, a private PostgreSQL, gateway processes, engine clients."""
