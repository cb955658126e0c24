import sys

from mobius.cli import main

sys.exit(main())
