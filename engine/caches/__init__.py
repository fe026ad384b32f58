"""Reuse across requests: token-prefix KV state (``prefix``) and exact objects keyed
by string, borrowed through leases (``objects``)."""
