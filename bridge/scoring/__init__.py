"""Scoring as computation: tool-name resolution, trajectory conversion, verify normalization, provenance."""
