"""Carrying decisions out: the reconcile loop and executor, drain, the reset/reboot Jobs and their
templates, replacement."""
