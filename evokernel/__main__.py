import sys

from evokernel.cli import main

sys.exit(main())
