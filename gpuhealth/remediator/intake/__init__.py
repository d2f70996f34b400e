"""Webhook bodies in, Node annotations out: Alertmanager webhook parsing, the intake queue and its
recorder, and the level-triggered sync with Alertmanager."""
