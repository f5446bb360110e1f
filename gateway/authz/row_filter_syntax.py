"""Why a `@row_filter` does not parse, said as "expected X at column N" rather than a grammar dump.

pyiceberg's parser (pyparsing) remains the only judge of what a row filter is: this module runs
only after it refused one, to say where and what. pyparsing backtracks out of its operator
grammar, so its own position is often column 1 and its message the whole grammar, cut mid-word.
`syntax_problem` re-reads the text with a small checker of the same grammar:

    filter     := or_expr
    or_expr    := and_expr (OR and_expr)*
    and_expr   := not_expr (AND not_expr)*
    not_expr   := NOT not_expr | "(" or_expr ")" | predicate
    predicate  := column op value | value op column | column BETWEEN value AND value
                | column [NOT] IN "(" value ("," value)* ")" | column IS [NOT] (NULL | NAN)
                | column [NOT] LIKE 'string' | true | false
    column     := name ("." name)*        (a name is a word or a "double-quoted" name)
    value      := 'string' | number | true | false
    op         := = | == | != | <> | < | <= | > | >=

and reports the first place it cannot continue, with a 1-based column. When the checker finds
nothing (pyiceberg refused a well-shaped filter for its values, e.g. a mixed IN list or a `%`
inside a LIKE pattern), the caller falls back to pyiceberg's own first line. Messages are bounded
(`MAX_MESSAGE_CHARS`) and quote at most one short token of the filter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_MESSAGE_CHARS = 240
_MAX_QUOTED = 24
_OPERATORS = ("<=", ">=", "<>", "!=", "==", "<", ">", "=")
_KEYWORDS = frozenset({"and", "or", "not", "is", "in", "null", "nan", "like", "between"})
_BOOLEANS = frozenset({"true", "false"})
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")  # as pyiceberg: no exponent
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
_VALUE = "a value (a 'string', a number, true or false)"
_COMPARISON = "a comparison (=, !=, <, <=, >, >=, IN, NOT IN, IS NULL, IS NOT NULL, LIKE, BETWEEN)"


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "word", "name" (double-quoted), "string", "number", "op", "(", ")", ",", ".", "end"
    text: str
    column: int  # 1-based

    @property
    def keyword(self) -> str:
        return self.text.lower() if self.kind == "word" else ""

    def shown(self) -> str:
        if self.kind == "end":
            return "the end of the filter"
        text = self.text if len(self.text) <= _MAX_QUOTED else self.text[:_MAX_QUOTED] + "..."
        return repr(text)


class _Problem(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def explain(text: str, err: Exception) -> str:
    """What is wrong with row filter `text`, which pyiceberg refused with `err`: the checker's
    "expected X at column N", else pyiceberg's first line when it is a plain message (a LIKE
    pattern, a literal), else the column pyparsing stopped at."""
    found = syntax_problem(text)
    if found is not None:
        return found
    first = str(err).splitlines()[0] if str(err) else ""
    if first and "Expected {" not in first and len(first) <= MAX_MESSAGE_CHARS:
        return first
    column = getattr(err, "col", None)
    return f"not accepted at column {column}" if isinstance(column, int) else "not accepted"


def syntax_problem(text: str) -> str | None:
    """The first place `text` leaves the row filter grammar ("expected X after Y at column N"),
    or None when its shape fits (the value itself was refused)."""
    try:
        _Checker(_tokens(text)).check()
    except _Problem as problem:
        return problem.message[:MAX_MESSAGE_CHARS]
    return None


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    at = 0
    while at < len(text):
        char = text[at]
        if char.isspace():
            at += 1
            continue
        start = at + 1
        if char in "'\"":
            end = _closing_quote(text, at)
            if end < 0:
                what = "string" if char == "'" else "quoted name"
                raise _Problem(f"the {what} opened at column {start} is not closed (expected {char})")
            tokens.append(_Token("string" if char == "'" else "name", text[at : end + 1], start))
            at = end + 1
            continue
        number = _NUMBER.match(text, at)
        if number is not None and (char.isdigit() or char == "." or text[at + 1 : at + 2].isdigit()):
            tokens.append(_Token("number", number.group(), start))
            at = number.end()
            continue
        word = _WORD.match(text, at)
        if word is not None:
            tokens.append(_Token("word", word.group(), start))
            at = word.end()
            continue
        operator = next((op for op in _OPERATORS if text.startswith(op, at)), None)
        if operator is not None:
            tokens.append(_Token("op", operator, start))
            at += len(operator)
            continue
        if char in "(),.":
            tokens.append(_Token(char, char, start))
            at += 1
            continue
        raise _Problem(f"unexpected character {char!r} at column {start}")
    tokens.append(_Token("end", "", len(text) + 1))
    return tokens


def _closing_quote(text: str, opening: int) -> int:
    """The index of the quote closing the one at `opening` ('' and \\" are escapes), or -1."""
    quote, at = text[opening], opening + 1
    while at < len(text):
        if quote == '"' and text[at] == "\\":
            at += 2
            continue
        if text[at] == quote:
            if quote == "'" and text[at + 1 : at + 2] == "'":
                at += 2
                continue
            return at
        at += 1
    return -1


class _Checker:
    """A recursive-descent reading of the grammar in the module docstring; raises _Problem."""

    def __init__(self, tokens: list[_Token]) -> None:
        self._tokens = tokens
        self._at = 0

    @property
    def _next(self) -> _Token:
        return self._tokens[self._at]

    def _take(self) -> _Token:
        token = self._tokens[self._at]
        self._at = min(self._at + 1, len(self._tokens) - 1)
        return token

    def _expected(self, what: str, after: _Token | None) -> _Problem:
        found = self._next
        shown = None if after is None else after.text.upper() if after.keyword in _KEYWORDS else after.text
        where = "" if shown is None else f" after {shown}"
        seen = "" if found.kind == "end" else f", found {found.shown()}"
        return _Problem(f"expected {what}{where} at column {found.column}{seen}")

    def check(self) -> None:
        self._or_expr(None)
        token = self._next
        if token.kind == ")":
            raise _Problem(f"unexpected ) at column {token.column}: no ( to close")
        if token.kind != "end":
            raise _Problem(
                f"expected AND, OR or the end of the filter at column {token.column}, found {token.shown()}"
            )

    def _or_expr(self, after: _Token | None) -> None:
        self._and_expr(after)
        while self._next.keyword == "or":
            self._and_expr(self._take())

    def _and_expr(self, after: _Token | None) -> None:
        self._not_expr(after)
        while self._next.keyword == "and":
            self._not_expr(self._take())

    def _not_expr(self, after: _Token | None) -> None:
        token = self._next
        if token.keyword == "not":
            self._not_expr(self._take())
        elif token.kind == "(":
            opening = self._take()
            self._or_expr(opening)
            if self._next.kind != ")":
                found = self._next
                raise _Problem(
                    f"expected ) at column {found.column} to close the ( at column {opening.column}"
                )
            self._take()
        elif token.kind == "end" or token.keyword in _KEYWORDS or token.kind in (")", ",", ".", "op"):
            raise self._expected("an expression (a column compared with a value, or a ( )", after)
        else:
            self._predicate()

    def _predicate(self) -> None:
        first = self._next
        if self._is_value(first):
            self._take()
            if self._next.kind == "op":
                operator = self._take()
                self._column(operator)
            elif first.keyword not in _BOOLEANS:
                raise self._expected("a comparison operator (=, !=, <, <=, >, >=)", first)
            return
        column = self._column(None)
        token = self._next
        if token.kind == "op":
            self._value(self._take())
        elif token.keyword == "between":
            self._value(self._take())
            if self._next.keyword != "and":
                raise self._expected("AND and the upper bound", self._tokens[self._at - 1])
            self._value(self._take())
        elif token.keyword == "is":
            after = self._take()
            if self._next.keyword == "not":
                after = self._take()
            if self._next.keyword not in ("null", "nan"):
                raise self._expected("NULL or NAN", after)
            self._take()
        elif token.keyword == "not":
            negation = self._take()
            if self._next.keyword not in ("in", "like"):
                raise self._expected("IN or LIKE", negation)
            self._in_or_like(self._take())
        elif token.keyword in ("in", "like"):
            self._in_or_like(self._take())
        else:
            raise self._expected(_COMPARISON, column)

    def _in_or_like(self, keyword: _Token) -> None:
        if keyword.keyword == "like":
            if self._next.kind != "string":
                raise self._expected("a 'string' pattern", keyword)
            self._take()
            return
        if self._next.kind != "(":
            raise self._expected("( and a list of values", keyword)
        after = self._take()
        kinds: set[str] = set()
        while True:
            value = self._next
            self._value(after)
            kinds.add(_value_kind(value))
            if len(kinds) > 1:
                raise _Problem(
                    f"the IN list mixes {' and '.join(sorted(kinds))} at column {value.column}: its "
                    "values must all be strings, all integers, all decimals or all true/false"
                )
            if self._next.kind == ")":
                self._take()
                return
            if self._next.kind != ",":
                raise self._expected(", or ) in the IN list", None)
            after = self._take()

    def _column(self, after: _Token | None) -> _Token:
        """A column name; returns its last part (what a message names it after)."""
        while True:
            token = self._next
            if not ((token.kind == "word" and token.keyword not in _KEYWORDS) or token.kind == "name"):
                raise self._expected("a column name", after)
            self._take()
            if self._next.kind != ".":
                return token
            after = self._take()

    def _value(self, after: _Token) -> None:
        if not self._is_value(self._next):
            raise self._expected(_VALUE, after)
        self._take()

    @staticmethod
    def _is_value(token: _Token) -> bool:
        return token.kind in ("string", "number") or token.keyword in _BOOLEANS


def _value_kind(token: _Token) -> str:
    """The kind of value an IN list must not mix (pyiceberg reads one kind per list)."""
    if token.kind == "string":
        return "strings"
    if token.kind == "number":
        return "integers" if token.text.lstrip("+-").isdigit() else "decimals"
    return "booleans"
