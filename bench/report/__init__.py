"""Reports of finished runs: summary tables, statistics, plots, paper tables, credit maps."""
