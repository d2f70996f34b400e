"""The jobs on the simulated fleet and the scheduler that places them: synchronous training jobs
(`training.py`), small jobs (`small.py`), the free nodes they are placed on (`placement.py`), and the scheduler
the faults and the cluster report node changes to (`scheduler.py`)."""
