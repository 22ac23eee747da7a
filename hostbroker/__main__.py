import sys

try:
    from hostbroker.cli import main
except KeyboardInterrupt:  # Ctrl-C while Python loads the command: no traceback
    sys.exit(130)

sys.exit(main())
