"""Geryon's brain: the iteration-time model, the cluster replay simulator and the threshold search."""
