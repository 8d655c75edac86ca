"""The base policies and their pins: the warm-start that builds a tiny base and the pinned copies with their
digests."""
