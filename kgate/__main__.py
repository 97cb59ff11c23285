"""Entry point: ``python -m kgate``."""

import sys

from kgate.cli import main

sys.exit(main())
