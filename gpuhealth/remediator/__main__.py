import sys

from gpuhealth.remediator.cli import main

sys.exit(main())
