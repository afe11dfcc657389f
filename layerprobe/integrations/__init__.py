"""Layer effectiveness watched while a model trains: `Monitor` for any loop, `LayerprobeCallback` for Trainer.

monitor.py measures a live model on a fixed calibration set and writes `step-N/` run directories;
scalars.py names what is logged; trainer.py plugs the monitor into `transformers.Trainer`'s callbacks and
logging. Sits above the API (it reuses its corpus reading and live-model handling) and below the cli.
"""

from layerprobe.integrations.monitor import Monitor
from layerprobe.integrations.trainer import LayerprobeCallback

__all__ = ["LayerprobeCallback", "Monitor"]
