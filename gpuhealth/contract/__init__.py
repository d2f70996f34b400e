"""The contract between gpuhealth's programs, written once: the names the exporter and the remediator both write
or read on a Node (names.py), the one PCI bus-id reader (pci.py), the Xid classes the exporter's conditions, the
alert rules and the dashboards are held to (xids.py), and how a file a person edits is read (yaml_source.py). It
imports nothing of gpuhealth, and both programs (and the dashboards' generator) import it, so nothing of it can
drift between them."""
