"""The diagnostic Job's node side: the judge that reads the tools' outputs and writes the verdict (cli.py)."""
