"""Hierarchical Newton study on planar stick robots ([HN sec. VI-A]): model, scenarios, runner."""
