"""The security console in the browser, served under /console/ by the gateway itself.

One more client of the same pipeline (docs/console.md): its pages are routes of the route table,
each decided by Cedar as the signed-in principal (`useConsole`, then the REST API's own action on
every object shown: `decisions`), and audited as that principal's. What it adds is how a browser
proves who it is: a server-side session (`session_auth`, `gateway.authn.console_sessions`) opened
by signing in with an API key or at an OpenID Connect issuer, CSRF tokens on every form, and
strict response headers (`pages`). Templates and the style sheet ship in the package.
"""
