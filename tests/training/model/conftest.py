"""The model tests' fixtures: `cpu` sets the CPU the precision choice sees (`cpus`)."""

from tests.training.model.cpus import cpu  # noqa: F401  # a fixture, registered by its import
