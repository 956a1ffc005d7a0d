"""Bringing models in and out of tfspec: published checkpoints as specs and weights, and back."""
