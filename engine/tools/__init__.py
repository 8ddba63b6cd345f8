"""Measurement tools behind `channel bench` and `channel perplexity`."""
