"""``python -m sinks``: see ``sinks.cli``."""

import sys

from sinks.cli import main

sys.exit(main())
