"""`python -m gregor.tools`: the same as the `gregor` command."""

import sys

from gregor.tools.cli import main

sys.exit(main())
