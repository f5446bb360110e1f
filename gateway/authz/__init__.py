"""Authorization: Cedar policies decide every operation.

Modules, one concept each:

- `operations`  the one table: operation id -> Cedar action, resource scope, group, extra checks;
                `check_route_table(ids)` refuses routes without an entry.
- `entities`    Cedar uids, resources (with their ancestor chain and inherited grants), principals.
- `context`     the request context (`RequestContext`; `ChangeSummary.of_effect` for changes).
- `loader`      read, parse and validate a policy directory with FILE:LINE problems.
- `contract`    the schema must describe what the gateway sends; checked at every load.
- `engine`      `PolicyEngine`: the active set (refused sets never replace it) and decisions.
- `authorizer`  `authorize(...) -> Verdict` (all checks of an operation; 404-vs-403),
                `is_visible`, `filter_visible` for listings.
- `reload`      `PolicyWatcher`: hot reload by polling; `reload_now()` for SIGHUP.
- `fixtures`    ALLOW/DENY request fixtures; `cli` the `cedarberg policies ...` commands.
- `binding`     where a column/row restriction cannot bind (lifted by an unrestricted permit, a
                local warehouse, a trusted client), for explain and review; `binding_static`
                the same known without the registry, logged when a set loads.

Only this package imports `cedarpy`.
"""
