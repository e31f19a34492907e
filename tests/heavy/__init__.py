"""Heavy suites: real TensorFlow (and later other real systems), run only with ``-m heavy``."""
