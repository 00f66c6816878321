"""``python -m orderedstream.chaos``: see orderedstream.chaos.runner."""

import sys

from orderedstream.chaos.runner import main

sys.exit(main())
