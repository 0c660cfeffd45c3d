"""The series store: each series' ring of recent samples and its compressed history, and the PromQL
selectors that find series in it."""
