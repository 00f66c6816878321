"""``python -m orderedstream.sinks``: see ``orderedstream.sinks.cli``."""

import sys

from orderedstream.sinks.cli import main

sys.exit(main())
