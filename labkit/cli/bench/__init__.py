"""``labkit bench ...``: one module per course part, each measuring its lessons side by side."""
