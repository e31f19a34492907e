"""advisor: how many workers should this parameter-server training job get?"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("advisor")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
