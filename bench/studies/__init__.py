"""Validity studies: do the numbers mean what they claim? The exact objective against its estimate, the
sequential design's error rates, the pretrained models' reports, and whether the numbers depend on the CPU."""
