"""arborcc: collective algorithms synthesized for the topology you actually have.

The pipeline (see README and docs/architecture.md) reads in the order data flows:
``topology`` -> ``synth`` / ``lang`` -> ``compiler`` -> ``ir`` -> ``verify`` / ``sim`` /
``runtime``; ``cli`` drives each stage.
"""

__version__ = "0.1.0"
