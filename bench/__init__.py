"""creditbench's engine: the typed core, policy loading, rollouts, the LightningModule, metrics,
MLflow tracking and the command line. ``tasks`` and ``methods`` are the two plug-in points and
depend only on this package's small typed core (:mod:`bench.core`, :mod:`bench.registry`)."""

__version__ = "0.1.0"
