"""cosample: collaborative sFlow sampling for virtualised data centres."""

__version__ = "0.1.0"
