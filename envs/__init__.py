"""The plant and the Gymnasium environment (task logic only; no controller imports here)."""
