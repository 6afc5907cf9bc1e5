"""``python -m kigi_tool_runtime ...`` is the ``kigi-stream`` command."""

import sys

from ._cli._entry import main

sys.exit(main())
