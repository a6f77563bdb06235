"""`python -m torchtpu qualify ...` (see torchtpu/cli.py)."""

from .cli import main

raise SystemExit(main())
