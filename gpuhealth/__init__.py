"""gpuhealth: a reliability stack for GPU fleets on Kubernetes.

One namespace for its parts: gpuhealth.exporter (the node agent), gpuhealth.remediator (the Alertmanager
receiver and its ladder), gpuhealth.simulator (the fleet simulator) and gpuhealth.contract (the names and
tables the parts share). The training helper is its own package, gpuhealth_training (training/)."""
