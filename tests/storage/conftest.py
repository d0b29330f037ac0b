import sys
from pathlib import Path

# Let the tests import the project's packages whatever directory pytest is started from.
ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
