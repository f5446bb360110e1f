"""The registry URLs the gateway accepts, and what each part of the store makes of them.

    sqlite:///PATH                       the embedded default (also `sqlite+aiosqlite:///PATH`)
    postgresql+asyncpg://USER@HOST/DB    scale-out (also `postgresql://...`)

Every runtime store (the registry, API keys, the user directory, console sessions) runs on the
registry's drivers (catalog.store.sqlite_driver on the stdlib `sqlite3`, catalog.store.
postgres_driver on asyncpg), whatever the spelling: `+aiosqlite` is accepted because deployments
have it in their settings, not because aiosqlite is used. Migrations (catalog.store.engine) run
on SQLAlchemy engines built from `migration_url`.
"""

from __future__ import annotations

SQLITE_PREFIXES = ("sqlite:///", "sqlite+aiosqlite:///")
POSTGRES_PREFIXES = ("postgresql+asyncpg://", "postgresql://")
SUPPORTED_FORMS = (
    "sqlite:///PATH (or sqlite+aiosqlite:///PATH) or postgresql+asyncpg://... (or postgresql://...)"
)


def is_supported(url: str) -> bool:
    return url.startswith(SQLITE_PREFIXES + POSTGRES_PREFIXES)


def sqlite_path(url: str) -> str | None:
    """The file (or `:memory:`) of a SQLite URL; None for any other URL."""
    for prefix in SQLITE_PREFIXES:
        if url.startswith(prefix):
            return url[len(prefix) :]
    return None


def is_postgres(url: str) -> bool:
    return url.startswith(POSTGRES_PREFIXES)


def migration_url(url: str) -> str:
    """`url` for a SQLAlchemy engine: `sqlite:///` (the stdlib driver) or `postgresql+asyncpg://`.
    Raises ValueError for any other URL (the message names the supported forms, never the URL)."""
    path = sqlite_path(url)
    if path is not None:
        return f"sqlite:///{path}"
    if is_postgres(url):
        return "postgresql+asyncpg://" + url.split("://", 1)[1]
    raise ValueError(f"the store URL must be {SUPPORTED_FORMS}")
