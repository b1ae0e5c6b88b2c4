"""`python -m sphere_tf_cli COMMAND ...`: the `sphere-tf` console command without its script."""

import sys

from sphere_tf_cli import main

if __name__ == "__main__":
    sys.exit(main())
