import sys

from gpuhealth.exporter.cli import main

sys.exit(main())
