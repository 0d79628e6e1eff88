"""``python -m thread_client``: run the daemon."""

import sys

from .cli import main

sys.exit(main())
