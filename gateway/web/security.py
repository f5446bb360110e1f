"""The security services of one gateway process, built at start-up and closed at shutdown.

Everything a request needs before it reaches the catalog lives here: the rate limiter, the three
authenticators (API keys, gateway tokens, OIDC issuers) behind the one the web layer asks for a
principal (`bearer`, `gateway.authn.bearer`), the Cedar policy engine and the audit log.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from cedarberg.gateway.audit import AuditLog
from cedarberg.gateway.audit_refusals import RefusalTally
from cedarberg.gateway.authn.api_keys import ApiKeyAuthenticator
from cedarberg.gateway.authn.bearer import BearerAuthenticator
from cedarberg.gateway.authn.delegation import Delegation, UserSources
from cedarberg.gateway.authn.directory import UserDirectory
from cedarberg.gateway.authn.errors import AuthenticationError
from cedarberg.gateway.authn.key_store import KeyStore, connect_key_store
from cedarberg.gateway.authn.oauth import Admission, TokenEndpoint
from cedarberg.gateway.authn.oidc import OidcAuthenticator
from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind, anonymous_principal_id
from cedarberg.gateway.authn.token_cache import VerifiedTokenCache
from cedarberg.gateway.authn.tokens import TokenIssuer
from cedarberg.gateway.authz.binding import warehouse_locations
from cedarberg.gateway.authz.binding_static import log_static_findings
from cedarberg.gateway.authz.engine import PolicyEngine
from cedarberg.gateway.authz.reload import PolicyWatcher
from cedarberg.gateway.config.settings import Settings
from cedarberg.gateway.ratelimit import OperationClass, RateLimiter, principal_key
from cedarberg.gateway.web.console.services import ConsoleServices
from cedarberg.gateway.web.delegation_judge import CedarDelegationJudge
from cedarberg.gateway.web.replay import PlanCache

log = logging.getLogger("cedarberg.security")


@dataclass(slots=True)
class Security:
    settings: Settings
    limiter: RateLimiter
    key_store: KeyStore
    api_keys: ApiKeyAuthenticator
    tokens: TokenIssuer
    token_endpoint: TokenEndpoint
    oidc: OidcAuthenticator
    policies: PolicyEngine
    audit: AuditLog
    refusals: RefusalTally  # 401s and 429s, aggregated into the audit log
    anonymous: Principal | None
    bearer: BearerAuthenticator  # every bearer credential form -> its principal
    plans: PlanCache
    directory: UserDirectory
    watcher: PolicyWatcher | None = None
    console: ConsoleServices | None = None  # the browser console, when `console.enabled`

    @classmethod
    async def open(cls, settings: Settings) -> Security:
        """Build every service. Raises on unusable configuration (policies, keys, audit file).

        API keys live beside the registry, in its database, on a small driver of their own."""
        policies = PolicyEngine(
            settings.authz.policy_dir,
            entity_cache_size=settings.authz.entity_cache_size,
            decision_cache_size=settings.authz.decision_cache_size,
            entity_cache_bytes=settings.authz.entity_cache_max_bytes,
            decision_cache_bytes=settings.authz.decision_cache_max_bytes,
            cache_entry_bytes=settings.authz.cache_max_entry_bytes,
        )
        # Each set that loads reports the restrictions it cannot enforce here (policies/README.md).
        locations = warehouse_locations(settings)
        policies.on_loaded(lambda engine: log_static_findings(engine, locations))
        policies.load()
        # `serve` upgraded or checked the schema before any worker started (gateway.serve.server).
        key_store = connect_key_store(settings.effective_store_url())
        api_keys = ApiKeyAuthenticator(key_store, settings.api_keys)
        tokens = TokenIssuer.open(settings.tokens, settings.data_dir)
        oidc = OidcAuthenticator(settings.oidc)
        anonymous = configured_anonymous(settings)
        if settings.anonymous is not None:
            log.warning(
                "ANONYMOUS ACCESS IS ON: requests without credentials act as %r (groups %s)",
                settings.anonymous.principal,
                ", ".join(settings.anonymous.groups) or "none",
            )
        limiter = RateLimiter.open(settings.rate_limits)
        audit = AuditLog.open(settings.audit)
        refusals = RefusalTally(
            audit, settings.audit.refusal_interval_seconds, settings.audit.refusal_max_sources
        )
        security = cls(
            settings=settings,
            limiter=limiter,
            key_store=key_store,
            api_keys=api_keys,
            tokens=tokens,
            token_endpoint=TokenEndpoint(api_keys, tokens, admit=_token_budget(limiter)),
            oidc=oidc,
            policies=policies,
            audit=audit,
            refusals=refusals,
            anonymous=anonymous,
            bearer=BearerAuthenticator(
                api_keys,
                tokens,
                oidc,
                VerifiedTokenCache(
                    settings.tokens.verified_cache_size, settings.tokens.verified_cache_max_bytes
                ),
                limiter.client,
            ),
            plans=_plan_cache(settings),
            directory=UserDirectory(key_store),
            console=ConsoleServices.build(settings, key_store) if settings.console.enabled else None,
        )
        # Engines acting for their users: the actor authenticates as any bearer credential does.
        security.token_endpoint.delegation = Delegation(
            settings.delegation,
            tokens,
            UserSources(security.bearer.authenticate, api_keys, security.directory, oidc),
            CedarDelegationJudge(policies, security.audit),
        )
        await oidc.warm_up()
        await api_keys.start_change_feed()
        refusals.start()
        if settings.authz.reload_interval_seconds > 0:
            security.watcher = PolicyWatcher(policies, settings.authz.reload_interval_seconds)
            security.watcher.start()
        return security

    async def reload_policies(self) -> None:
        """SIGHUP: reload now (a set that fails validation is refused; the last good one stays)."""
        outcome = await asyncio.to_thread(self.policies.reload)
        log.info(
            "policy reload: %s (version %s from %s)",
            outcome,
            self.policies.version[:12],
            self.policies.directory,
            extra={
                "outcome": str(outcome),
                "policy_version": self.policies.version,
                "policy_dir": str(self.policies.directory),
            },
        )

    async def close(self) -> None:
        if self.watcher is not None:
            await self.watcher.stop()
        if self.console is not None:
            await self.console.close()
        await self.api_keys.aclose()
        await self.key_store.close()
        await self.oidc.close()
        await self.limiter.aclose()
        await self.refusals.stop()  # the last interval's counts, before the log closes
        await self.audit.aclose()


def configured_anonymous(settings: Settings) -> Principal | None:
    """The principal of requests without credentials, if `[anonymous]` is configured (else None:
    such requests are refused). Also what an access review decides as the anonymous principal."""
    if settings.anonymous is None:
        return None
    return Principal(
        id=anonymous_principal_id(settings.anonymous.principal),
        kind=PrincipalKind.ANONYMOUS,
        groups=frozenset(settings.anonymous.groups),
        auth_method=AuthMethod.ANONYMOUS,
    )


def _plan_cache(settings: Settings) -> PlanCache:
    """Plans hold unsealed answers: they are kept no longer than unsealed load results may be
    (`gateway.web.app._load_result_cache`), and not at all when those are not kept."""
    keys, cache = settings.kms.cache, settings.cache
    if not keys.enabled or cache.load_result_max_bytes == 0:
        return PlanCache(max_entries=0, max_bytes=0)
    return PlanCache(
        cache.plan_max_entries,
        cache.plan_max_bytes,
        min(cache.load_result_max_age_seconds, keys.max_age_seconds),
    )


def _token_budget(limiter: RateLimiter) -> Admission:
    """Token issuance counts against the principal's `rate_limits.token` budget (after the
    credentials verified, so nobody can spend another principal's budget)."""

    async def admit(principal: Principal) -> int | None:
        retry = await limiter.hit_principal(principal_key(principal), OperationClass.TOKEN)
        return None if retry is None else retry.seconds

    return admit


__all__ = ["AuthenticationError", "Security"]
