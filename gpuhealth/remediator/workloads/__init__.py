"""Workload failures: the watcher of ended pods, the classifier, its evidence and the restart-loop guard."""
