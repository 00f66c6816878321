"""``python -m orderedstream.app.chaos``: see orderedstream.app.chaos.runner."""

import sys

from orderedstream.app.chaos.runner import main

sys.exit(main())
