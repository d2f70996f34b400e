"""Probes: each reads one hardware signal source and returns a ProbeResult, or raises ProbeError."""
