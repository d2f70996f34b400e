"""Who the exporter is in the `api` fixture (tests/exporter/conftest.py): the Node it runs on and its pod's
ServiceAccount token, bound to that Node."""

NODE = "gpu-node-1"
TOKEN = "exporter-token"
