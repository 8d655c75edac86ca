"""Tools that serve the documentation, outside the library: the MLflow UI's server and screenshots of it
(docs/mlflow-ui.md)."""
