"""Authentication: every way a request can prove who sent it, each producing a `Principal`."""
