"""`python -m fusion_delegate`: the fusion-delegate command line."""
import sys

from .cli import main

sys.exit(main())
