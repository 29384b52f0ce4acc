import sys

from backflip.cli import main

sys.exit(main())
