"""Renderers. Each reads only ``metrics.json`` (as a dict), so any report can be re-rendered later."""
