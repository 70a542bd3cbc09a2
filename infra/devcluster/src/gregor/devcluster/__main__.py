import sys

from gregor.devcluster.cli import main

sys.exit(main())
