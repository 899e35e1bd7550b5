import sys

from bridge.commands.cli import main

sys.exit(main())
