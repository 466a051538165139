"""The target's own view: who it is (identity), its Prometheus /metrics and their scraper, and
its /tokenize for prompts of exact length."""
