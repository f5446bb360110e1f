"""`cedarberg admin-openapi`: the admin API's OpenAPI document, as the gateway serves it.

    cedarberg admin-openapi > docs/admin-openapi.json
    cedarberg admin-openapi --format markdown > docs/admin-api.md

The document describes code, not a deployment: no settings are read.
"""

from __future__ import annotations

import json


def run_admin_openapi_command(output_format: str) -> int:
    """Print the document (`json`) or its Markdown rendering (`markdown`); exit status 0."""
    # The route table imports the whole gateway: only this command pays for it.
    from cedarberg.gateway.web.app import ALL_ROUTES
    from cedarberg.gateway.web.routes.openapi import markdown
    from cedarberg.gateway.web.routes.openapi.document import build

    document = build(ALL_ROUTES)
    if output_format == "markdown":
        print(markdown.render(document), end="")
    else:
        print(json.dumps(document, indent=2, ensure_ascii=False))
    return 0
