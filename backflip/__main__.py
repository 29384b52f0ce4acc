import sys

try:  # a Ctrl-C while backflip is still importing: the exit status of an interrupt, no traceback
    from backflip.cli import main
except KeyboardInterrupt:
    sys.exit(130)

sys.exit(main())
