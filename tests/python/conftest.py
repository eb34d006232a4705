"""pytest setup for the Python package's tests: import gradwire from python/ of this tree
(unless PYTHONPATH already names one) and the library from $GRADWIRE_LIB or build/."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")
if PYDIR not in sys.path:
    sys.path.insert(0, PYDIR)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
