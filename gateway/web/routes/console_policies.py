"""The console's Policies page and its change preview.

    GET  /console/policies                 the active set, a refused one, fixture results  (showPolicies)
    GET  /console/policies/files/{file}    an active file's text, its policies' lines       (showPolicies)
    GET  /console/policies/preview         the change preview's form                      (useConsole;
                                           previewPolicies decided on the page)
    POST /console/policies/preview         a preview's result, shown at once (previewPolicies, CSRF)

Each is decided as the admin API's own action, so the page is allowed exactly to whom
`GET /admin/v1/policies` and `POST /admin/v1/policies/preview` are, and audited as the signed-in
principal's. What they show is what those endpoints answer: the engine's `status()` (the same
document) and `policy_preview.run_preview` (the same function), so page and API cannot disagree.

A preview changes nothing (no file is written and the candidate decides no request), so its
result is rendered directly, not redirected to. The form is multipart (an upload) and bounded by
`authz.preview.max_body_bytes` on its Content-Length before anything is read (413); its CSRF
token and origin are checked by the pipeline (`Route.session`).
"""

from __future__ import annotations

import asyncio
from typing import Any, Final
from urllib.parse import urlencode

from aiohttp import web
from multidict import MultiDictProxy

from cedarberg.catalog.errors import InvalidRequestError, NotFoundError
from cedarberg.gateway.authz.entities import catalog_resource
from cedarberg.gateway.authz.fixtures import run_fixtures
from cedarberg.gateway.config.preview import DEFAULT_DECISIONS
from cedarberg.gateway.config.settings import Settings
from cedarberg.gateway.web import http
from cedarberg.gateway.web.console import decisions
from cedarberg.gateway.web.console.layout import page
from cedarberg.gateway.web.console.policy_view import (
    POLICIES,
    PREVIEW,
    answered_fixture_rows,
    file_rows,
    fixture_rows,
    incomplete_reasons,
    policy_starts,
    source_lines,
)
from cedarberg.gateway.web.keys import security, services
from cedarberg.gateway.web.route import Route
from cedarberg.gateway.web.routes.policy_preview import run_preview

_SECTION: Final = "Policies"
_Form = MultiDictProxy[str | bytes | bytearray | web.FileField]  # what `request.post()` answers
_CRUMBS: Final = (("Policies", POLICIES),)


async def policies(request: web.Request) -> web.Response:
    """The active set (version, directory, files and their policies), the last refused set if
    the newest files were refused (its problems; the active set keeps deciding), and the
    directory's fixtures run against the active set."""
    engine = security(request).policies
    status = engine.status()
    active = engine.active
    results = await asyncio.to_thread(run_fixtures, engine, engine.directory) if active is not None else []
    context = {
        "section": _SECTION,
        "version": status["version"],
        "directory": status["directory"],
        "files": file_rows(status, active.effects if active is not None else {}),
        "policy_count": len(status["policies"]),
        "refused": status["refused"],
        "fixtures": fixture_rows(results),
        "preview_url": PREVIEW
        if decisions.would_allow(request, "previewPolicies", catalog_resource())
        else None,
    }
    return page(request, "policies.html", context)


async def policy_file(request: web.Request) -> web.Response:
    """One file of the active set, its lines numbered and anchored (`#L12`), each policy's first
    line marked with its id. Raises NotFoundError for a name the active set does not hold."""
    status = security(request).policies.status()
    name = request.match_info["file"]
    sources: dict[str, str] = status["files"]
    if name not in sources:
        raise NotFoundError(f"The active policy set has no file {name!r}")
    context = {
        "section": _SECTION,
        "crumbs": [*_CRUMBS, (name, request.path)],
        "name": name,
        "version": status["version"],
        "lines": source_lines(sources[name], policy_starts(status, name)),
        "edit_url": f"{PREVIEW}?{urlencode({'file': name})}"
        if decisions.would_allow(request, "previewPolicies", catalog_resource())
        else None,
    }
    return page(request, "policy_file.html", context)


def _default_decisions(settings: Settings) -> int:
    return min(DEFAULT_DECISIONS, settings.authz.preview.max_decisions)


def _form_context(request: web.Request, entered: dict[str, Any]) -> dict[str, Any]:
    """What the preview's form shows: the active set's policy files (to mark removed) and the
    bounds, with what was entered."""
    settings = services(request).settings
    status = security(request).policies.status()
    removable = sorted(name for name in status["files"] if name.endswith(".cedar"))
    return {
        "section": _SECTION,
        "crumbs": [*_CRUMBS, ("Change preview", PREVIEW)],
        "version": status["version"],
        "removable": removable,
        "max_decisions": settings.authz.preview.max_decisions,
        "max_body_bytes": settings.authz.preview.max_body_bytes,
        "entered": {
            "name": "",
            "text": "",
            "removed": (),
            "decisions": _default_decisions(settings),
            **entered,
        },
        "error": None,
        "result": None,
    }


async def preview_form(request: web.Request) -> web.Response:
    """The change preview's form; `?file=NAME` starts it from the active file NAME's text (for
    those who may also see the policies). Decided as previewPolicies, as its result is."""
    decisions.require(request, "previewPolicies", catalog_resource())
    entered: dict[str, Any] = {}
    wanted = http.query_value(request, "file")
    if wanted is not None:
        sources: dict[str, str] = security(request).policies.status()["files"]
        if wanted in sources and decisions.decide(request, "showPolicies", catalog_resource()).allowed:
            entered = {"name": wanted, "text": sources[wanted]}
    return page(request, "preview.html", _form_context(request, entered))


def _text(form: _Form, key: str) -> str:
    value = form.get(key, "")
    return value if isinstance(value, str) else ""


def _uploaded(form: _Form) -> tuple[str, str] | None:
    """The uploaded file's (name, text), or None when no file was chosen. Raises
    InvalidRequestError for a file that is not UTF-8 text."""
    upload = form.get("upload")
    if not isinstance(upload, web.FileField) or not upload.filename:
        return None
    try:
        return upload.filename, upload.file.read().decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidRequestError(f"{upload.filename} is not UTF-8 text") from None


def _decisions(value: str, bound: int) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        number = -1
    if not 0 <= number <= bound:
        raise InvalidRequestError(f"decisions must be a whole number from 0 to {bound}")
    return number


def _entered(form: _Form) -> dict[str, Any]:
    return {
        "name": _text(form, "name").strip(),
        "text": _text(form, "text"),
        "removed": tuple(v for v in form.getall("removed", []) if isinstance(v, str)),
        "decisions": _text(form, "decisions"),
    }


def _changed_files(entered: dict[str, Any], upload: tuple[str, str] | None) -> dict[str, str]:
    """The file the form gives ({} for none): a pasted text under its name, or an upload under
    the name typed (else its own). Raises InvalidRequestError for a text without a name, or both
    a pasted text and an upload."""
    name, text = entered["name"], entered["text"]
    if upload is not None:
        if text.strip():
            raise InvalidRequestError("paste a file's text or upload a file, not both")
        entered["name"] = name or upload[0]
        entered["text"] = upload[1]
        return {entered["name"]: upload[1]}
    if not text.strip():
        if name:
            raise InvalidRequestError(f"{name} has no text: paste it, upload it, or mark a file removed")
        return {}
    if not name:
        raise InvalidRequestError("name the file the text is (e.g. grants.cedar)")
    return {name: text}


async def preview_change(request: web.Request) -> web.Response:
    """Preview the form's change (see the module docstring) and show the result at once. A
    mistake in the form (a bad name or number, a removed file the set lacks) is shown on the
    form with status 400."""
    form = await request.post()  # read (bounded) and its CSRF token checked by the pipeline
    settings = services(request).settings
    entered = _entered(form)
    try:
        upload = _uploaded(form)
        files = _changed_files(entered, upload)
        limit = _decisions(entered["decisions"], settings.authz.preview.max_decisions)
        answer = await run_preview(request, files, entered["removed"], (), limit)
    except InvalidRequestError as err:
        context = _form_context(request, entered)
        return page(request, "preview.html", {**context, "error": str(err)}, status=400)
    context = _form_context(request, entered)
    result = {
        **answer,
        "fixture_rows": answered_fixture_rows(answer["fixtures"]),
        "incomplete": incomplete_reasons(answer["decisions"]),
    }
    return page(request, "preview.html", {**context, "result": result})


def _preview_form_bytes(settings: Settings) -> int:
    return settings.authz.preview.max_body_bytes


ROUTES = [
    Route("GET", POLICIES, policies, "showPolicies", advertised=False, session=True),
    Route("GET", POLICIES + "/files/{file}", policy_file, "showPolicies", advertised=False, session=True),
    Route("GET", PREVIEW, preview_form, "useConsole", advertised=False, session=True),
    Route(
        "POST",
        PREVIEW,
        preview_change,
        "previewPolicies",
        advertised=False,
        session=True,
        form_bytes=_preview_form_bytes,
    ),
]
