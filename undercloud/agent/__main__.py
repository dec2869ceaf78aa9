"""Entry point: `python3 -m undercloud.agent`."""

import sys

from undercloud.agent.cli import main

sys.exit(main())
