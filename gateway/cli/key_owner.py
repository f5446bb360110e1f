"""Whom a new API key is for, as the key commands (offline `keys create` and `admin keys create`)
ask for it: the operator must say whether the key is a person's or a service's."""

from __future__ import annotations

import argparse

from cedarberg.gateway.authn.principal import PrincipalKind

MAX_EXPIRY_DAYS = 36_500


def add_key_owner_options(parser: argparse.ArgumentParser) -> None:
    """`--person NAME` / `--service NAME` (or `--principal NAME --kind user|service`): whom a new
    key is for. Read back with `key_owner`."""
    owner = parser.add_mutually_exclusive_group()
    owner.add_argument("--person", metavar="NAME", help="a personal key for this person")
    owner.add_argument("--service", metavar="NAME", help="a service key for this service (an engine, a job)")
    owner.add_argument("--principal", metavar="NAME", help="the principal's name; needs --kind")
    parser.add_argument("--kind", choices=["user", "service"], help="with --principal: a person or a service")


def key_owner(args: argparse.Namespace) -> tuple[str, PrincipalKind]:
    """The principal and kind `add_key_owner_options` read. Raises ValueError (the message says
    what to give) unless exactly one way of naming them was used."""
    if args.person is not None or args.service is not None:
        if args.kind is not None:
            raise ValueError("--kind goes with --principal only (--person and --service say the kind)")
        if args.person is not None:
            return str(args.person), PrincipalKind.USER
        return str(args.service), PrincipalKind.SERVICE
    if args.principal is None or args.kind is None:
        raise ValueError(
            "say whom the key is for: --person NAME (a personal key) or --service NAME "
            "(a service key, for an engine or a job), or --principal NAME with --kind user|service"
        )
    return str(args.principal), PrincipalKind(args.kind)
