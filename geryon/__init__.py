"""Geryon: network-level flow scheduling for parameter-server training."""

__version__ = "0.1.0"
