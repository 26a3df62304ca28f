"""Only the licence, which pyproject.toml cannot state for every setuptools hostagent builds with.

setuptools 77 and later take an SPDX expression (``license_expression``) and deprecate the
older free-text field; Debian 12's setuptools 66 knows only the free-text field and refuses the
expression. Everything else is in pyproject.toml. LICENSE is included by setuptools' default
licence-file patterns.
"""

import setuptools

SPDX = int(setuptools.__version__.split(".")[0]) >= 77
setuptools.setup(**({"license_expression": "MIT"} if SPDX else {"license": "MIT"}))
