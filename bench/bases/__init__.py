"""The base policies and their pins: the warm-start that builds a tiny base, the pinned copies and
their digests, the locked library versions and the numerics fingerprint."""
