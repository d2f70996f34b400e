"""The remediator's clients: Kubernetes (its watch caches, the leader Lease) and Alertmanager (silences,
alerts)."""
