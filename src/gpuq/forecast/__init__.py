"""Start-time forecasts: the simulator run forward from the live state."""
