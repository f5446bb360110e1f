"""HTTP routes. Every route is declared once, as a `Route`, so the `endpoints` list of
/v1/config is derived from exactly what is registered."""
