"""accelkw-seed: ``SeedKwargs``, reproducible runs (an example of a third-party plugin)."""

from accelkw_seed.handler import Seeded, SeedKwargs

__all__ = ["SeedKwargs", "Seeded"]
