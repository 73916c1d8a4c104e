"""medvl_engine: the headless engine behind the MedVL viewer plugin.

Slides and mammograms in real formats, pathology vision-language heatmaps
(LIMIT / Conch-Z), TopKSigLIP for mammography, training and evaluation.
Importing this package does no I/O, touches no GPU and no network.
"""

from medvl_engine.common.atomic import atomic_directory, atomic_write, atomic_write_stream
from medvl_engine.errors import MedVLError

__version__ = "0.1.0"
__all__ = ["MedVLError", "__version__", "atomic_directory", "atomic_write", "atomic_write_stream"]
