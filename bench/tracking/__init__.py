"""The MLflow store: a run's logger and what it records, the data lineage, and which sweep a results
folder and a store hold."""
