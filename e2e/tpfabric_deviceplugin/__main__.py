"""``python -m tpfabric_deviceplugin``: run the fake plugin; never more than calling ``main``."""

from __future__ import annotations

from tpfabric_deviceplugin.cli import main

raise SystemExit(main())
