"""The console's user directory (in the Keys section): the people engines may act for
(delegation), and their groups, each change decided with the admin API's own action.

    GET  /console/users            the directory, a page at a time    (listDirectoryUsers)
    POST /console/users            add a user or replace its groups   (putDirectoryUser, CSRF)
    POST /console/users/delete     remove a user, once confirmed      (deleteDirectoryUser, CSRF)

The pipeline decides each operation on the catalog, as for `/admin/v1/users`; the work is the
directory's (`directory.user_page`, `UserDirectory.put` / `delete`), so a change takes effect as
one made through the admin API does (at the user's next token). Bad input (a name or group the
directory refuses, a deletion not confirmed) gets the form back with the message and 400.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlencode

from aiohttp import web

from cedarberg.catalog.errors import InvalidRequestError, NotFoundError
from cedarberg.gateway.authn.directory import InvalidDirectoryRequestError
from cedarberg.gateway.authn.subject_token import MAX_NAME_LENGTH, valid_user_name
from cedarberg.gateway.authz.entities import catalog_resource
from cedarberg.gateway.web import http
from cedarberg.gateway.web.console import decisions
from cedarberg.gateway.web.console.form_values import groups_of, sentence, utc_text
from cedarberg.gateway.web.console.layout import page
from cedarberg.gateway.web.console.pages import see_other
from cedarberg.gateway.web.console.session_auth import form_of
from cedarberg.gateway.web.keys import security
from cedarberg.gateway.web.route import Route
from cedarberg.gateway.web.routes.directory import user_page

KEYS: Final = "/console/keys"
USERS: Final = "/console/users"
PAGE_SIZE: Final = 50
_CRUMBS: Final = (("Keys", KEYS), ("Users", USERS))


async def users(request: web.Request) -> web.Response:
    """A page of the directory, with the forms to add, change and remove users."""
    after = http.query_value(request, "after") or None
    if after is not None and not valid_user_name(after):
        raise InvalidRequestError("invalid page: 'after' must be a user name")
    records, next_after = await user_page(request, after, PAGE_SIZE)
    catalog = catalog_resource()
    context = {
        "section": "Keys",
        "crumbs": list(_CRUMBS),
        "users": [
            {
                "name": r.name,
                "groups": r.groups,
                "created": utc_text(r.created_at),
                "updated": utc_text(r.updated_at),
            }
            for r in records
        ],
        "next_url": None if next_after is None else f"{USERS}?{urlencode({'after': next_after})}",
        "first_url": USERS if after is not None else None,
        "may_put": decisions.would_allow(request, "putDirectoryUser", catalog),
        "may_delete": decisions.would_allow(request, "deleteDirectoryUser", catalog),
        "max_name": MAX_NAME_LENGTH,
    }
    return page(request, "users.html", context)


def _form_back(request: web.Request, values: dict[str, str], problem: str, delete: bool) -> web.Response:
    context = {
        "section": "Keys",
        "crumbs": list(_CRUMBS),
        "values": values,
        "problem": problem,
        "delete": delete,
        "max_name": MAX_NAME_LENGTH,
    }
    return page(request, "user_change.html", context, 400)


async def put(request: web.Request) -> web.Response:
    """List a user with exactly the form's groups (putDirectoryUser, decided; CSRF checked)."""
    form = await form_of(request)
    values = {"name": form.get("name", ""), "groups": form.get("groups", "")}
    try:
        await security(request).directory.put(values["name"], groups_of(values["groups"]))
    except InvalidDirectoryRequestError as problem:
        return _form_back(request, values, sentence(problem), delete=False)
    return see_other(USERS)


async def delete(request: web.Request) -> web.Response:
    """Unlist a user (deleteDirectoryUser), once the form's confirmation box is ticked."""
    form = await form_of(request)
    values = {"name": form.get("name", ""), "groups": ""}
    if form.get("confirm") != "yes":
        problem = "Tick the box to confirm: engines can no longer act for a user removed from the directory."
        return _form_back(request, values, problem, delete=True)
    if not await security(request).directory.delete(values["name"]):
        raise NotFoundError("user is not in the directory")
    return see_other(USERS)


ROUTES = [
    Route("GET", USERS, users, "listDirectoryUsers", advertised=False, session=True),
    Route("POST", USERS, put, "putDirectoryUser", advertised=False, session=True),
    Route("POST", USERS + "/delete", delete, "deleteDirectoryUser", advertised=False, session=True),
]
