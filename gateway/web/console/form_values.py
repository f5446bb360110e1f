"""What the console's Keys and Users forms share: reading a list of names from one text field,
telling a refusal as a sentence, and showing a moment. Pure text: no request is read here."""

from __future__ import annotations

from datetime import UTC, datetime


def groups_of(text: str) -> list[str]:
    """Group names separated by commas or new lines, each trimmed (blank entries dropped); the
    names themselves are checked by whoever stores them."""
    return [g.strip() for g in text.replace("\n", ",").split(",") if g.strip()]


def sentence(problem: Exception) -> str:
    """A refusal's message as a sentence for the form: capitalised, ending with a full stop."""
    text = str(problem)
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def utc_text(value: datetime | None) -> str:
    """`value` as UTC text to the second, or '' for None."""
    return "" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
