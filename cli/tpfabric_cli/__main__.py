"""``python -m tpfabric_cli`` runs the ``tpfabric`` command line."""

from tpfabric_cli.main import app

app()
