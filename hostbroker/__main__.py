import sys

from hostbroker.cli import main

sys.exit(main())
