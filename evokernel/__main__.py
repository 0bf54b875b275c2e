import sys

from evokernel.cli.main import main

sys.exit(main())
