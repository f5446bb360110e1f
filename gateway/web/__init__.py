"""The request: the aiohttp application and its lifecycle (`app`), the middlewares (`middlewares`),
every typed key (`keys`), the one error table (`errors`), the request-level access decisions and
the handlers (`routes`). Imports the layers below it (authn, authz, storage, config, audit, ...);
none of them imports it (`tests/test_architecture.py`).
"""
