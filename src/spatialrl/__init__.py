"""spatialrl: train and benchmark vision-language-model agents on active spatial tasks."""

__version__ = "0.1.0"
