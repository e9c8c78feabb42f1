"""``python -m accelkw_core`` runs the command line."""

from accelkw_core.cli.main import main

raise SystemExit(main())
